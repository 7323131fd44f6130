"""TensorBoard event files, on by default as in Ray: each trial's directory
gets an `events.out.tfevents.*` file (private to the user) whose records
(TFRecord framing with masked CRC-32C checksums, checked here with a CRC of
the test's own; Event protos, read with tensorboardX's protos) hold every
numeric metric at its iteration. oxray writes them without tensorboardX."""

import os
import stat
import struct
import subprocess
import sys

import pytest

from oxray import tune

pytest.importorskip("tensorboardX")
from tensorboardX.proto import event_pb2  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")


def masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path):
    events = []
    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            assert struct.unpack("<I", header[8:])[0] == masked_crc32c(header[:8])
            data = f.read(length)
            assert struct.unpack("<I", f.read(4))[0] == masked_crc32c(data)
            event = event_pb2.Event()
            event.ParseFromString(data)
            events.append(event)
    return events


def learning(config):
    for step in range(3):
        tune.report({"loss": config["lr"] * (3 - step), "nested": {"acc": step / 3}, "tag": "text"})


def test_every_numeric_metric_is_a_scalar_at_its_iteration(tmp_path):
    results = tune.Tuner(
        learning,
        param_space={"lr": tune.grid_search([0.1, 0.2])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    for result in results:
        [events_file] = [p for p in (tmp_path).rglob("events.out.tfevents.*") if str(p).startswith(result.path)]
        assert stat.S_IMODE(os.stat(events_file).st_mode) == 0o600
        events = read_events(events_file)
        assert events[0].file_version == "brain.Event:2"
        scalars = {}
        for event in events:
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, round(value.simple_value, 5)))
        lr = result.config["lr"]
        assert scalars["ray/tune/loss"] == [(1, round(3 * lr, 5)), (2, round(2 * lr, 5)), (3, round(lr, 5))]
        assert [s for s, _ in scalars["ray/tune/nested/acc"]] == [1, 2, 3]
        assert "ray/tune/tag" not in scalars, "text is not a scalar"


DRIVER = """
import sys
from pathlib import Path
import oxray as ray
from oxray import tune

def learning(config):
    tune.report({"loss": config["lr"]})

ray.init(num_cpus=1)
tune.Tuner(learning, param_space={"lr": 0.1}, run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0)).fit()
files = list(Path(sys.argv[1]).rglob("events.out.tfevents.*"))
print(len(files), "torch" in sys.modules, "tensorboardX" in sys.modules)
"""


def test_the_driver_writes_them_without_importing_torch_or_tensorboardx(tmp_path):
    # A driver of its own: this test process has imported tensorboardX (and so torch) already.
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path)], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["1", "False", "False"], out.stderr
