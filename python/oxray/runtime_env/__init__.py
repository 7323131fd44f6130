"""Ray's `ray.runtime_env`: `RuntimeEnv`, a dict of a task's, actor's or job's runtime
environment. Tasks, actors and `init()` take its `env_vars`; a job submitted through the
Jobs API also takes `working_dir`, `py_modules` and `pip`. Any other field is refused where
the environment is used, naming it."""

from oxray.runtime_env.runtime_env import RuntimeEnv

__all__ = ["RuntimeEnv"]
