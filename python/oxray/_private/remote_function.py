"""`@remote` on a function."""

from __future__ import annotations

import os

from oxray._native import TaskKind
from oxray._private import options as opts
from oxray._private.generator import default_num_returns
from oxray._private.state import CURRENT, STATE, current_job_id, current_task_id
from oxray._private.submission import (
    check_arguments,
    encode_args,
    function_id_for,
    new_return_refs,
    returns_for,
    signature_of,
)

DEFAULT_TASK_RETRIES = 3


class RemoteFunction:
    def __init__(self, function, options: dict):
        import inspect

        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            # As Ray: a task has no event loop to run on; an async actor does.
            raise ValueError(
                f"'async def' should not be used for remote tasks ({getattr(function, '__qualname__', function)}). "
                "You can wrap the async function with `asyncio.run(f())`, or make it a method of an async actor."
            )
        self._function = function
        self._options = opts.validate(dict(options), "task")
        # Ray's default task name: the last part of the function's qualified name (`f`, not `outer.<locals>.f`).
        self._name = getattr(function, "__qualname__", getattr(function, "__name__", "task")).rpartition(".")[2]
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", "task")
        self.__wrapped__ = function
        self._signature = signature_of(function)
        decorator = getattr(function, "__ray_invocation_decorator__", None)
        self._invocation_decorator = decorator if callable(decorator) else None
        self._cached_fields = None

    def __call__(self, *args, **kwargs):
        raise TypeError(
            "Remote functions cannot be called directly. "
            f"Instead of running '{self.__name__}()', try '{self.__name__}.remote()'."
        )

    bind = staticmethod(opts.refuse_bind)

    def options(self, **options):
        if "max_calls" in options:
            # As in Ray: a worker's call count is the function's, so it is set where the function is declared.
            raise ValueError("Setting 'max_calls' is not supported in '.options()'. Pass it to @remote(max_calls=...).")
        return opts.WithOptions(self, {**self._options, **opts.validate(dict(options), "task")})

    def remote(self, *args, **kwargs):
        return self._submit(args, kwargs, self._options)

    def _remote(self, args=None, kwargs=None, **options):
        """Ray's `_remote(args=, kwargs=, **options)`: `.options(**options).remote(*args, **kwargs)`."""
        merged = {**self._options, **opts.validate(dict(options), "task")} if options else self._options
        return self._submit(tuple(args or ()), dict(kwargs or {}), merged)

    def _submit(self, args, kwargs, options):
        decorator = self._invocation_decorator
        if decorator is not None:
            # Ray's hook for rewriting a call's arguments (and what `.remote()` returns) on the caller's side.
            return decorator(lambda call_args, call_kwargs: self._send(tuple(call_args), dict(call_kwargs), options))(
                args, kwargs
            )
        return self._send(args, kwargs, options)

    def _send(self, args, kwargs, options):
        from oxray._private.api import _client

        check_arguments(self._signature, args, kwargs, self._name)
        client = _client()
        if CURRENT.capture_child_tasks:
            options = opts.with_captured_placement(options)
        fields = self._submit_fields(options)
        fid = function_id_for(client, self._function, self)
        num_returns = fields["num_returns"]
        encoded, kwarg_names, nested, keep = encode_args(client, args, kwargs, fields["name"], callee=self._function)
        task_id = os.urandom(16)
        return_ids, refs = new_return_refs(num_returns, task_id)
        client.submit(
            kind=TaskKind.NORMAL,
            task_id=task_id,
            function_id=fid,
            args=encoded,
            kwarg_names=kwarg_names,
            return_ids=return_ids,
            nested_refs=nested,
            job_id=current_job_id(),
            parent_task_id=current_task_id(),
            **fields["spec"],
        )
        del keep
        return returns_for(refs, num_returns)

    def _submit_fields(self, options: dict) -> dict:
        """The submission fields that follow from the options and the session alone, worked out
        once per options dict and session rather than on every call."""
        key = (STATE.epoch, STATE.namespace, STATE.job_env_vars, STATE.runtime_env, CURRENT.env_vars)
        cached = self._cached_fields
        if cached is not None and cached[0] is options and cached[1] == key:
            return cached[2]
        fields = task_submit_fields(options, self._name, self._function)
        if options is self._options:  # `.options(...)` dicts are usually one call's: not kept
            self._cached_fields = (options, key, fields)
        return fields


def task_submit_fields(options: dict, default_name: str, function=None) -> dict:
    """{"num_returns", "name", "spec": client.submit's option-derived keyword arguments}."""
    num_returns = default_num_returns(function, options)
    opts.check_whole_devices(options)
    name = options.get("name") or default_name
    max_retries = options.get("max_retries")
    retry_exceptions, retry_types = opts.retry_policy(options)
    max_calls = options.get("max_calls")
    if max_calls is None:
        # Ray's default: a GPU task's worker exits after it, so the GPU memory it took is freed.
        max_calls = 1 if options.get("num_gpus") else 0
    env = opts.submitted_env_vars(options)
    request = opts.resource_request(options, default_cpus=1)
    opts.check_fits_placement_group(options, request, request, default_name)
    spec = {
        "name": name,
        "resources": request,
        "max_retries": DEFAULT_TASK_RETRIES if max_retries is None else max_retries,
        "retry_exceptions": retry_exceptions,
        "retry_exception_types": retry_types,
        "max_calls": max_calls,
        "capture_child_tasks": opts.captures_child_tasks(options),
        **opts.strategy_fields(options),
        "env_vars": env,
        "job_namespace": STATE.namespace,
    }
    return {"num_returns": num_returns, "name": name, "spec": spec}
