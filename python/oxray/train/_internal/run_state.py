"""What a Train run tells the head about itself, for the dashboard's run pages
and Ray's `/api/train/v2/runs/v1`: its state in Ray's `TrainRun` shape (status,
attempts with their workers by rank and errors, checkpoints and which ones
retention kept) and each report's metrics. The controller calls it at each
step; a failure to reach the head is logged once and never stops training."""

from __future__ import annotations

import json
import os
import time
from typing import Optional

from oxray.train._internal.worker_group import _log

# Checkpoints listed per run at most (the oldest drop off; retention decides what is on disk).
MAX_CHECKPOINTS_LISTED = 1000


def _now_ns() -> int:
    return time.time_ns()


class RunReporter:
    def __init__(self, name: str, storage_path: str, num_workers: int, worker_resources: dict):
        import oxray

        self.state = {
            "id": os.urandom(16).hex(),
            "name": name,
            "job_id": oxray.get_runtime_context().get_job_id(),
            "controller_actor_id": "",
            "status": "INITIALIZING",
            "status_detail": "",
            "start_time_ns": _now_ns(),
            "end_time_ns": None,
            "storage_path": storage_path,
            "num_workers": num_workers,
            "worker_resources": dict(worker_resources),
            "attempts": [],
            "checkpoints": [],
            "reports": 0,
        }
        from oxray.tune import session as tune_session

        if tune_session._session is not None:
            # A Tune trial's run: the experiment's page links its trial here.
            info = tune_session._session.info
            self.state["tune"] = {"experiment_id": info.get("experiment_id"), "trial_id": info["trial_id"]}
        self._new_reports: list = []
        self._warned = False
        self.flush()

    # -- the run --

    def status(self, status: str, detail: str = "") -> None:
        self.state["status"] = status
        self.state["status_detail"] = detail
        if status in ("FINISHED", "ERRORED", "ABORTED"):
            self.state["end_time_ns"] = _now_ns()
        self.flush()

    # -- attempts --

    def attempt_started(self) -> None:
        attempt = {
            "run_id": self.state["id"],
            "attempt_id": str(len(self.state["attempts"])),
            "status": "PENDING",
            "status_detail": "",
            "start_time_ns": _now_ns(),
            "end_time_ns": None,
            "resources": [{"resources": self.state["worker_resources"]}] * self.state["num_workers"],
            "workers": [],
        }
        self.state["attempts"].append(attempt)
        self.status("SCHEDULING")

    def workers_ready(self, infos: list, layout: list, node_ip) -> None:
        attempt = self.state["attempts"][-1]
        attempt["status"] = "RUNNING"
        attempt["workers"] = [
            {
                "world_rank": ranks["world_rank"],
                "local_rank": ranks["local_rank"],
                "node_rank": ranks["node_rank"],
                "node_id": info["node_id"],
                "node_ip": node_ip(info["node_id"]),
                "pid": info["pid"],
                "gpu_ids": [str(g) for g in info.get("gpu_ids") or []],
                "status": "ACTIVE",
            }
            for info, ranks in zip(infos, layout, strict=True)
        ]
        self.status("RUNNING")

    def attempt_ended(self, status: str, detail: str = "", failed_rank: Optional[int] = None) -> None:
        if not self.state["attempts"]:
            return
        attempt = self.state["attempts"][-1]
        attempt["status"] = status
        attempt["status_detail"] = detail
        attempt["end_time_ns"] = _now_ns()
        for worker in attempt["workers"]:
            worker["status"] = "DEAD"
            if failed_rank is not None and worker["world_rank"] == failed_rank:
                worker["error"] = detail
        self.flush()

    def abort(self, detail: str) -> None:
        """The run stopped for a reason of the driver's own (Ctrl-C, an error outside the workers)."""
        attempts = self.state["attempts"]
        if attempts and attempts[-1]["end_time_ns"] is None:
            self.attempt_ended("ABORTED", detail)
        self.status("ABORTED", detail)

    # -- reports --

    def report(self, metrics: dict, dir_name: Optional[str], path: Optional[str], kept_dirs: set) -> None:
        self.state["reports"] += 1
        self._new_reports.append(
            {
                "index": self.state["reports"],
                "time_ms": int(time.time() * 1000),
                "attempt": len(self.state["attempts"]) - 1,
                "metrics": metrics,
                "checkpoint": dir_name,
            }
        )
        if dir_name is not None:
            listed = self.state["checkpoints"]
            listed.append(
                {"report_index": self.state["reports"], "dir_name": dir_name, "path": path, "metrics": metrics}
            )
            del listed[:-MAX_CHECKPOINTS_LISTED]
        for checkpoint in self.state["checkpoints"]:
            checkpoint["kept"] = checkpoint["dir_name"] in kept_dirs
        self.flush()

    def flush(self) -> None:
        from oxray._private.api import _client

        try:
            reports = [json.dumps(r, default=str) for r in self._new_reports]
            _client().update_train_run(self.state["id"], json.dumps(self.state, default=str), reports)
            self._new_reports.clear()
        except Exception as e:  # noqa: BLE001 - the dashboard's view must never stop training
            if not self._warned:
                self._warned = True
                _log(f"could not tell the head about run {self.state['name']!r} (the dashboard will lag): {e}")
