"""The actor a trial runs in: the trainable runs on a thread of its own, and
each `tune.report` waits until the driver has taken the result
(`next_result`), so a trial the scheduler stops never runs ahead of the
driver's decision. Results get Ray's auto-filled keys here, where the
process, host and clocks are."""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import functools
import os
import queue
import shutil
import socket
import threading
import time
import traceback

from oxray import cloudpickle
from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.storage import join, open_storage
from oxray.tune import session as tune_session
from oxray.tune._internal.files import make_private_dirs

# How long a stopped trial's code gets to unwind (its `finally`, a class trainable's `cleanup()`,
# a Train run shutting its workers down) before its placement groups are removed anyway.
STOP_GRACE_S = 5.0


class TrialStopped(BaseException):
    """Raised in a trial's code at its next `tune.report` once Tune stops the trial, so that it
    unwinds (a BaseException: a trainable's `except Exception` does not swallow it)."""


@functools.lru_cache(maxsize=1)
def _host() -> tuple:
    """(hostname, node ip) of this process, looked up once: every result carries them."""
    hostname = socket.gethostname()
    try:
        return hostname, socket.gethostbyname(hostname)
    except OSError:
        return hostname, "127.0.0.1"


@contextlib.contextmanager
def _output_to_files(trial_dir: str, names: tuple):
    """Ray's `log_to_file`: what the trial prints goes to files in its directory (appended, so a
    retry or a restore adds to them) while it runs, instead of the worker's log."""
    out_name, err_name = names
    with contextlib.ExitStack() as stack:
        files: dict = {}

        def opened(name: str):
            if name not in files:
                fd = os.open(os.path.join(trial_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                files[name] = stack.enter_context(os.fdopen(fd, "a", buffering=1))
            return files[name]

        if out_name:
            stack.enter_context(contextlib.redirect_stdout(opened(out_name)))
        if err_name:
            stack.enter_context(contextlib.redirect_stderr(opened(err_name)))
        yield


class _TrialSession:
    def __init__(self, actor: "TrialActor"):
        self.actor = actor
        self.info = actor.info

    def report(self, metrics, checkpoint):
        self.actor._report(metrics, checkpoint)

    def latest_checkpoint(self):
        return self.actor.latest_checkpoint

    def own_placement_group(self, group):
        """A placement group the trial's Train run made: removed when Tune stops the trial."""
        self.actor.owned_groups.append(group)

    def train_demand(self, demand: dict):
        """Waits until Tune lets this trial's Train run start its workers."""
        self.actor.results.put(("train_demand", demand))
        self.actor.wait_for_driver()


class TrialActor:
    def start(self, payload: dict):
        """Starts the trainable; `payload` carries it (cloudpickled), its config and the trial's facts.
        A reused actor starts its next trial here too, once the last one has returned. Returns the
        trial's first event, as `next_result` does."""
        self.info = payload["info"]
        self.config = payload["config"]
        self.iteration = payload["iteration"]
        self.time_total = payload["time_total"]
        self.checkpoint_index = payload["checkpoint_index"]
        self.latest_checkpoint = Checkpoint(payload["checkpoint"]) if payload["checkpoint"] else None
        self.started = self.last = time.time()
        self.iterations_since_restore = 0
        self.results: queue.Queue = queue.Queue()
        self.owned_groups: list = []
        self.stopping = False
        self.acks = threading.Semaphore(0)
        self.awaiting_ack = False
        # A class trainable's instance stays for the next trial on this actor (reuse_actors).
        self.keep_instance = payload.get("reuse", False)
        os.environ.setdefault("TUNE_ORIG_WORKING_DIR", os.getcwd())
        os.chdir(os.environ["TUNE_ORIG_WORKING_DIR"])
        if self.info.get("storage_options"):
            from oxray.train._internal.storage import register_options

            register_options(self.info["trial_uri"], self.info["storage_options"])
        # On another node than the driver's, its directory is made here.
        make_private_dirs(self.info["trial_dir"])
        if os.environ.get("RAY_CHDIR_TO_TRIAL_DIR", "1") != "0":
            os.chdir(self.info["trial_dir"])
        # A reused actor's next trial of the same trainable takes the one already loaded.
        if payload["trainable"] != getattr(self, "trainable_bytes", None):
            self.trainable = cloudpickle.loads(payload["trainable"])
            self.trainable_bytes = payload["trainable"]
        trainable = self.trainable
        # The trial's thread runs in this call's task context: what it submits is placed as the actor's
        # work is (its placement group, child tasks captured), and belongs to the same job.
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self._run, trainable), name="tune-trial", daemon=True)
        self.thread.start()
        # The trial's first event, so that starting a trial costs the driver one call, not two.
        return self.next_result()

    def next_result(self):
        """The trial's next event: `("result", result)`, `("done", None)` or `("error", (text, pickled))`."""
        if self.awaiting_ack:
            self.awaiting_ack = False
            self.acks.release()
        kind, value = self.results.get()
        self.awaiting_ack = kind in ("result", "train_demand")
        return kind, value

    def wait_for_driver(self) -> None:
        """Blocks the trial's code until the driver has taken what it sent; raises `TrialStopped`
        once Tune stops the trial."""
        self.acks.acquire()
        if self.stopping:
            raise TrialStopped()

    def release(self, keep: bool = False) -> bool:
        """Stops the trial's code at its next report (it unwinds: `finally`, a Train run's
        shutdown, and `cleanup()` unless `keep`: a class trainable's instance is then kept for the
        next trial here, `reset_config`), then removes the placement groups its Train runs made
        (their workers with them), so a trial Tune stops frees them at once (ray-project/ray#54305).
        Runs beside a waiting `next_result` (the actor has two threads). Whether the trial's code
        has ended, so the actor may take another trial."""
        from oxray.util.placement_group import remove_placement_group

        self.keep_instance = keep
        if getattr(self, "thread", None) is not None and self.thread.is_alive():
            self.stopping = True
            self.acks.release()
            self.thread.join(STOP_GRACE_S)
        for group in getattr(self, "owned_groups", []):
            try:
                remove_placement_group(group)
            except Exception:  # already removed by the run itself
                pass
        self.owned_groups = []
        return getattr(self, "thread", None) is None or not self.thread.is_alive()

    def shutdown(self) -> None:
        """Before the actor goes: `cleanup()` of the class trainables kept for reuse."""
        from oxray.tune.class_trainable import cleanup_kept

        cleanup_kept()

    def _run(self, trainable):
        with _output_to_files(self.info["trial_dir"], self.info.get("log_files") or (None, None)):
            self._run_trainable(trainable)

    def _run_trainable(self, trainable):
        tune_session._session = _TrialSession(self)
        try:
            returned = trainable(self.config)
            # Ray's older style: a dict returned is the trial's last result; any other value is
            # reported under `_metric` (tune.result.DEFAULT_METRIC).
            if isinstance(returned, dict):
                self._report(returned, None)
            elif returned is not None:
                self._report({"_metric": returned}, None)
        except TrialStopped:
            self.results.put(("stopped", None))
            return
        except BaseException as e:  # the trial errs; the experiment goes on
            text = traceback.format_exc()
            try:
                pickled = cloudpickle.dumps(e)
            except Exception:
                pickled = cloudpickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))
            self.results.put(("error", (text, pickled)))
            return
        finally:
            tune_session._session = None
        self.results.put(("done", None))

    def _persist(self, checkpoint, dir_name: str) -> Checkpoint:
        """Copies a reported checkpoint into the trial's directory, or uploads it to a remote
        experiment's bucket from this node; the copy Tune keeps."""
        trial_uri = self.info.get("trial_uri")
        if trial_uri:
            target = join(trial_uri, dir_name)
            if checkpoint.path != target:
                with checkpoint.as_directory() as local:
                    open_storage(trial_uri).upload_dir(local, dir_name)
            return Checkpoint(target)
        target = os.path.join(self.info["trial_dir"], dir_name)
        source = checkpoint.to_directory() if checkpoint._is_remote else checkpoint.path
        if os.path.abspath(source) != os.path.abspath(target):
            shutil.copytree(source, target, dirs_exist_ok=True)
        return Checkpoint(target)

    def _report(self, metrics: dict, checkpoint):
        checkpoint_dir_name = None
        if checkpoint is not None:
            checkpoint_dir_name = f"checkpoint_{self.checkpoint_index:06d}"
            self.latest_checkpoint = self._persist(checkpoint, checkpoint_dir_name)
            self.checkpoint_index += 1
        now = time.time()
        self.iteration += 1
        self.iterations_since_restore += 1
        result = dict(metrics)
        result.update(
            timestamp=int(now),
            checkpoint_dir_name=checkpoint_dir_name,
            # A trainable may end its trial itself by reporting `done=True`, as in Ray.
            done=bool(metrics.get("done", False)),
            training_iteration=self.iteration,
            trial_id=self.info["trial_id"],
            date=datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"),
            time_this_iter_s=now - self.last,
            time_total_s=self.time_total + (now - self.started),
            pid=os.getpid(),
            hostname=_host()[0],
            node_ip=_host()[1],
            config=self.config,
            time_since_restore=now - self.started,
            iterations_since_restore=self.iterations_since_restore,
        )
        self.last = now
        self.results.put(("result", result))
        # Until the driver has taken it: it may stop this trial now.
        self.wait_for_driver()
