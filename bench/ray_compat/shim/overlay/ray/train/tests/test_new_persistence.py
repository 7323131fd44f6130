"""The storage helpers Tune's test files import from Ray's Train tests
(``ray.train.tests.test_new_persistence``), written for the harness: an S3 bucket on a
moto server (``mock_s3_bucket_uri``) and its local stand-in."""

import logging
import urllib.parse
from contextlib import contextmanager

from _ray_compat_shim import lenient_getattr
from ray._common.test_utils import simulate_s3_bucket
from ray.air._internal.uri_utils import URI

__getattr__ = lenient_getattr(__name__)


@contextmanager
def mock_s3_bucket_uri():
    """A fresh bucket on a moto S3 server on localhost:5002; yields its URI (``URI``)."""
    port = 5002
    region = "us-west-2"
    with simulate_s3_bucket(port=port, region=region) as s3_uri:
        import boto3

        s3 = boto3.client("s3", region_name=region, endpoint_url=f"http://localhost:{port}")
        s3.create_bucket(
            Bucket=urllib.parse.urlparse(s3_uri).netloc,
            CreateBucketConfiguration={"LocationConstraint": region},
        )
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        yield URI(s3_uri)
        logging.getLogger("werkzeug").setLevel(logging.INFO)


@contextmanager
def dummy_context_manager(*args, **kwargs):
    yield "dummy value"
