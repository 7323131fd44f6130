"""`get_runtime_context()`: ids of the node, job, task and actor this code runs in."""

from __future__ import annotations

from oxray._private.state import STATE, current_task_id


class RuntimeContext:
    def get_node_id(self) -> str:
        return STATE.node_id

    def get_job_id(self) -> str:
        job = getattr_current("job_id") or STATE.job_id
        return job.hex()

    def get_task_id(self):
        tid = current_task_id()
        return tid.hex() if tid else None

    def get_actor_id(self):
        return STATE.actor_id.hex() if STATE.actor_id else None

    def get_worker_id(self) -> str:
        return STATE.worker_id.hex() if STATE.worker_id else ""

    @property
    def namespace(self) -> str:
        return STATE.namespace

    def get_namespace(self) -> str:
        return STATE.namespace

    @property
    def node_id(self):
        return self.get_node_id()

    @property
    def job_id(self):
        return self.get_job_id()

    @property
    def task_id(self):
        return self.get_task_id()

    @property
    def actor_id(self):
        return self.get_actor_id()

    def get_accelerator_ids(self) -> dict:
        from oxray._private.api import get_gpu_ids

        return {"GPU": [str(g) for g in get_gpu_ids()]}

    def get_runtime_env_string(self) -> str:
        import json

        return json.dumps(STATE.runtime_env)


def getattr_current(name):
    from oxray._private.state import CURRENT

    return getattr(CURRENT, name, None)


def get_runtime_context() -> RuntimeContext:
    return RuntimeContext()
