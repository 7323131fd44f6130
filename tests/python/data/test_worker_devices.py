"""Data learns that it runs in a Train worker, and that worker's device, from
`_private.worker_devices`, which Train sets; nothing is imported under a
blanket `except ImportError`, so a broken torch install is reported."""

import sys

import pytest

from oxray._private import worker_devices
from oxray.data import iterator
from oxray.train._internal import session


def test_device_auto_is_the_cpu_outside_a_train_loop():
    assert not worker_devices.in_train_loop()
    assert iterator._resolve_device("auto") is None
    assert iterator._resolve_device("cpu") == "cpu"


def test_train_marks_its_loop_and_data_uses_the_workers_device(monkeypatch):
    import torch

    session.set_session(object())
    try:
        assert worker_devices.in_train_loop()
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        assert iterator._resolve_device("auto") == torch.device("cpu")
    finally:
        session.set_session(None)
    assert not worker_devices.in_train_loop()


def test_a_broken_torch_import_is_not_hidden(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    worker_devices.set_in_train_loop(True)
    try:
        with pytest.raises(ImportError):
            iterator._resolve_device("auto")
    finally:
        worker_devices.set_in_train_loop(False)
