"""A job's runtime_env beyond working_dir and env_vars, through Ray's own
`JobSubmissionClient`: `pip` (a virtualenv over the cluster's packages, cached
by its requirements; the wheel is built here, since there is no index),
`py_modules` (a local directory and a wheel, uploaded by the client), and
`s3://` archives as working_dir and py_modules (a moto S3 server). The job's
tasks import what its driver can."""

import base64
import csv
import hashlib
import importlib.util
import io
import textwrap
import zipfile

import pytest

from cli_cluster import running_cluster
from oxray_testutil import ray_jobs_client as ray_client
from oxray_testutil import wait_job_terminal

pytestmark = [pytest.mark.timeout(300)]
job_submission = pytest.importorskip("ray.job_submission")
JobStatus = job_submission.JobStatus


def wait_terminal(client, job_id):
    return wait_job_terminal(client, job_id, timeout=240)  # a pip install may run first


def build_wheel(directory, name, version, source, console_scripts=None):
    """A pure-Python wheel of one module, `name`, written the way the wheel
    spec lays it out (METADATA, WHEEL and a RECORD of sha256 hashes), with
    `console_scripts` (script name: `module:function`) for pip to install."""
    files = {
        f"{name}/__init__.py": source.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: oxray-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    if console_scripts:
        lines = "".join(f"{script} = {target}\n" for script, target in console_scripts.items())
        files[f"{name}-{version}.dist-info/entry_points.txt"] = f"[console_scripts]\n{lines}".encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{name}-{version}.dist-info/RECORD", "", ""])
    files[f"{name}-{version}.dist-info/RECORD"] = record.getvalue().encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture
def client(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        yield ray_client(cluster)


# A driver that imports `module` itself and in a task on the cluster.
DRIVER = """
import importlib, sys
import oxray as ray

ray.init()
name = sys.argv[1]
print("driver", importlib.import_module(name).VERSION)

@ray.remote
def in_a_task(name):
    return importlib.import_module(name).VERSION

print("task", ray.get(in_a_task.remote(name)))
"""


def test_pip_installs_into_a_cached_virtualenv_over_the_cluster(client, tmp_path):
    source = "VERSION = '1.2.3'\n\ndef main():\n    print('script', VERSION)\n"
    wheel = build_wheel(tmp_path, "oxray_pipdemo", "1.2.3", source, {"oxray-pipdemo": "oxray_pipdemo:main"})
    work = tmp_path / "work"
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    env = {"working_dir": str(work), "pip": [str(wheel)]}
    # The venv is built under a temporary name and renamed: its console script still runs.
    first = client.submit_job(entrypoint="python driver.py oxray_pipdemo && oxray-pipdemo", runtime_env=env)
    assert wait_terminal(client, first) == JobStatus.SUCCEEDED, client.get_job_logs(first)
    logs = client.get_job_logs(first)
    assert "driver 1.2.3" in logs and "task 1.2.3" in logs and "script 1.2.3" in logs, logs
    assert "creating a virtualenv" in logs, logs
    root = tmp_path / "oxray"
    assert len(list(root.rglob("runtime_resources/pip/*/bin/oxray-pipdemo"))) == 1
    assert not list(root.rglob("*.building")), "nothing is left under the temporary name"
    # The same requirements reuse the virtualenv.
    again = client.submit_job(entrypoint="python driver.py oxray_pipdemo", runtime_env=env)
    assert wait_terminal(client, again) == JobStatus.SUCCEEDED, client.get_job_logs(again)
    assert "creating a virtualenv" not in client.get_job_logs(again)
    # The cluster's own environment is untouched.
    assert importlib.util.find_spec("oxray_pipdemo") is None
    plain = client.submit_job(entrypoint="python -c 'import oxray_pipdemo'")
    assert wait_terminal(client, plain) == JobStatus.FAILED


def test_a_failing_pip_install_fails_the_job_with_pips_reason(client, tmp_path):
    job_id = client.submit_job(entrypoint="true", runtime_env={"pip": [str(tmp_path / "missing-0.1-py3-none-any.whl")]})
    assert wait_terminal(client, job_id) == JobStatus.FAILED
    info = client.get_job_info(job_id)
    assert info.error_type == "RUNTIME_ENV_SETUP_FAILURE", info
    assert "pip install failed" in info.message and "missing-0.1" in info.message, info.message
    with pytest.raises(RuntimeError, match="pip_version"):
        client.submit_job(entrypoint="true", runtime_env={"pip": {"packages": ["x"], "pip_version": "==23.0"}})


def test_py_modules_a_directory_and_a_wheel_uploaded_by_rays_client(client, tmp_path):
    module = tmp_path / "src" / "oxray_localmod"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("VERSION = 'local-7'\n")
    wheel = build_wheel(tmp_path, "oxray_wheelmod", "0.9", "VERSION = '0.9'\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    env = {"working_dir": str(work), "py_modules": [str(module), str(wheel)]}
    local = client.submit_job(entrypoint="python driver.py oxray_localmod", runtime_env=env)
    assert wait_terminal(client, local) == JobStatus.SUCCEEDED, client.get_job_logs(local)
    assert "driver local-7" in client.get_job_logs(local) and "task local-7" in client.get_job_logs(local)
    uris = client.get_job_info(local).runtime_env["py_modules"]
    assert uris[0].startswith("gcs://_ray_pkg_") and uris[1] == "gcs://oxray_wheelmod-0.9-py3-none-any.whl", uris
    wheeled = client.submit_job(entrypoint="python driver.py oxray_wheelmod", runtime_env=env)
    assert wait_terminal(client, wheeled) == JobStatus.SUCCEEDED, client.get_job_logs(wheeled)
    assert "task 0.9" in client.get_job_logs(wheeled)


def zipped(entries):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in entries.items():
            archive.writestr(path, text)
    return buffer.getvalue()


def test_s3_archives_as_working_dir_and_py_modules(moto_s3, tmp_path, monkeypatch):
    app = {
        "app/main.py": textwrap.dedent(
            """
            import helper, s3mod
            print(helper.GREETING, s3mod.VERSION)
            """
        ),
        "app/helper.py": "GREETING = 'hello from s3'\n",
    }
    moto_s3.put_object(Bucket="oxray-test", Key="jobs/app.zip", Body=zipped(app))
    moto_s3.put_object(Bucket="oxray-test", Key="jobs/mods.zip", Body=zipped({"s3mod/__init__.py": "VERSION = 's3'\n"}))
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        client = ray_client(cluster)
        env = {"working_dir": "s3://oxray-test/jobs/app.zip", "py_modules": ["s3://oxray-test/jobs/mods.zip"]}
        job_id = client.submit_job(entrypoint="python main.py", runtime_env=env)
        assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_info(job_id).message
        assert client.get_job_logs(job_id) == "hello from s3 s3\n"
        missing = client.submit_job(entrypoint="true", runtime_env={"working_dir": "s3://oxray-test/jobs/none.zip"})
        assert wait_terminal(client, missing) == JobStatus.FAILED
        info = client.get_job_info(missing)
        assert info.error_type == "RUNTIME_ENV_SETUP_FAILURE" and "none.zip" in info.message, info
