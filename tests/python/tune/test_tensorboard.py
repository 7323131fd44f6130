"""TensorBoard event files, on by default as in Ray: each trial's directory
gets an `events.out.tfevents.*` file whose records (TFRecord framing, Event
protos, read here with tensorboardX's protos) hold every numeric metric at
its iteration."""

import struct

import pytest

from oxray import tune

pytest.importorskip("tensorboardX")
from tensorboardX.proto import event_pb2  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")


def read_events(path):
    events = []
    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            data = f.read(length)
            f.read(4)
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
        scalars = {}
        for event in read_events(events_file):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, round(value.simple_value, 5)))
        lr = result.config["lr"]
        assert scalars["ray/tune/loss"] == [(1, round(3 * lr, 5)), (2, round(2 * lr, 5)), (3, round(lr, 5))]
        assert [s for s, _ in scalars["ray/tune/nested/acc"]] == [1, 2, 3]
        assert "ray/tune/tag" not in scalars, "text is not a scalar"
