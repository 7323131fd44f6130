"""Checkpoint helpers Train tests import from ``ray.train.tests.util``, written for the harness."""

import contextlib
import os
import pickle
import tempfile

from _ray_compat_shim import lenient_getattr

from oxray.train import Checkpoint

__getattr__ = lenient_getattr(__name__)


@contextlib.contextmanager
def create_dict_checkpoint(data, checkpoint_cls=None):
    """A checkpoint directory holding ``data`` pickled as ``data.pkl``."""
    with tempfile.TemporaryDirectory() as tmpdir:
        with open(os.path.join(tmpdir, "data.pkl"), "wb") as f:
            pickle.dump(data, f)
        yield (checkpoint_cls or Checkpoint).from_directory(tmpdir)


def load_dict_checkpoint(checkpoint):
    """The dict ``create_dict_checkpoint`` stored in ``checkpoint``."""
    with checkpoint.as_directory() as checkpoint_dir:
        with open(os.path.join(checkpoint_dir, "data.pkl"), "rb") as f:
            return pickle.load(f)
