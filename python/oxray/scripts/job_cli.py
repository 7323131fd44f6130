"""`oxray job submit|status|logs|stop|list|delete`: Ray's `ray job` commands and
flags, over `oxray.job_submission`."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys


def add_parser(sub) -> None:
    job = sub.add_parser("job", help="submit and manage jobs (Ray's `ray job` commands)")
    commands = job.add_subparsers(dest="job_command", required=True)

    def with_address(p):
        p.add_argument("--address", help="the head's HTTP address (default: RAY_ADDRESS, else this host's cluster)")
        return p

    submit = with_address(commands.add_parser("submit", help="submit a job; follows its output unless --no-wait"))
    submit.add_argument("--submission-id", "--job-id", dest="submission_id", help="the job's id (default: generated)")
    submit.add_argument("--working-dir", help="a local directory uploaded as the job's working_dir")
    submit.add_argument("--runtime-env-json", help="the runtime_env as JSON")
    submit.add_argument("--metadata-json", help="metadata as a JSON object of strings")
    submit.add_argument("--entrypoint-num-cpus", type=float)
    submit.add_argument("--entrypoint-num-gpus", type=float)
    submit.add_argument("--entrypoint-memory", type=int)
    submit.add_argument("--entrypoint-resources", help="custom resources as JSON")
    submit.add_argument("--no-wait", action="store_true", help="return once submitted, without following the output")
    submit.add_argument("entrypoint", nargs=argparse.REMAINDER, help="the command to run, after --")
    for name, text in (("status", "a job's status"), ("stop", "stop a job"), ("delete", "delete a finished job")):
        p = with_address(commands.add_parser(name, help=text))
        p.add_argument("job_id")
        if name == "stop":
            p.add_argument("--no-wait", action="store_true", help="do not wait for the job to stop")
    logs = with_address(commands.add_parser("logs", help="a job's output"))
    logs.add_argument("job_id")
    logs.add_argument("-f", "--follow", action="store_true", help="follow the output until the job ends")
    with_address(commands.add_parser("list", help="every job"))


def _fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"oxray: error: {message}", file=sys.stderr)
    sys.exit(1)


def _json_arg(text, flag: str):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        _fail(f"{flag}={text!r} is not valid JSON ({e})")


def _follow(client, job_id: str) -> None:
    async def run():
        async for chunk in client.tail_job_logs(job_id):
            print(chunk, end="", flush=True)

    asyncio.run(run())


def _final_status(client, job_id: str) -> int:
    from oxray.job_submission import JobStatus

    info = client.get_job_info(job_id)
    word = {
        JobStatus.SUCCEEDED: "succeeded",
        JobStatus.FAILED: "failed",
        JobStatus.STOPPED: "was stopped",
    }.get(info.status, f"is {info.status.value}")
    print(f"Job '{job_id}' {word}")
    if info.status == JobStatus.FAILED and info.message:
        print(info.message)
    return 1 if info.status == JobStatus.FAILED else 0


def run(args) -> None:
    from oxray.exceptions import AuthenticationError
    from oxray.job_submission import JobSubmissionClient

    try:
        client = JobSubmissionClient(args.address)
        _run(client, args)
    except (AuthenticationError, RuntimeError, ConnectionError, ValueError, TypeError) as e:
        _fail(str(e))


def _run(client, args) -> None:
    command = args.job_command
    if command == "submit":
        entrypoint = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint
        if not entrypoint:
            _fail("no entrypoint: give the command after --, e.g. `oxray job submit -- python script.py`")
        runtime_env = _json_arg(args.runtime_env_json, "--runtime-env-json") or {}
        if args.working_dir:
            runtime_env["working_dir"] = args.working_dir
        job_id = client.submit_job(
            entrypoint=shlex.join(entrypoint),
            submission_id=args.submission_id,
            runtime_env=runtime_env or None,
            metadata=_json_arg(args.metadata_json, "--metadata-json"),
            entrypoint_num_cpus=args.entrypoint_num_cpus,
            entrypoint_num_gpus=args.entrypoint_num_gpus,
            entrypoint_memory=args.entrypoint_memory,
            entrypoint_resources=_json_arg(args.entrypoint_resources, "--entrypoint-resources"),
        )
        print(f"Job '{job_id}' submitted successfully")
        if args.no_wait:
            print(f"Query its status with `oxray job status {job_id}`, its output with `oxray job logs {job_id}`")
            return
        _follow(client, job_id)
        sys.exit(_final_status(client, job_id))
    if command == "status":
        info = client.get_job_info(args.job_id)
        print(f"Status for job '{args.job_id}': {info.status.value}")
        if info.message:
            print(f"Status message: {info.message}")
    elif command == "logs":
        if args.follow:
            _follow(client, args.job_id)
        else:
            print(client.get_job_logs(args.job_id), end="")
    elif command == "stop":
        stopped = client.stop_job(args.job_id)
        if not stopped:
            print(f"Job '{args.job_id}' had already ended")
            return
        if args.no_wait:
            print(f"Job '{args.job_id}' is being stopped")
            return
        _wait_stopped(client, args.job_id)
    elif command == "delete":
        client.delete_job(args.job_id)
        print(f"Job '{args.job_id}' deleted successfully")
    elif command == "list":
        for info in client.list_jobs():
            print(f"{info.submission_id}\t{info.status.value}\t{info.entrypoint}")


def _wait_stopped(client, job_id: str) -> None:
    import time

    while not client.get_job_status(job_id).is_terminal():
        time.sleep(0.2)
    print(f"Job '{job_id}' was stopped")
