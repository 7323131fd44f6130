"""What an experiment prints at verbosity 1, in the layout of Ray 2.60's
output engine: a boxed configuration block, then a status block (trial
counts, times, logical resource use, the best trial so far, a table of
trials with their parameters and latest metrics), periodically and at the
end, and a line per trial start, end and error."""

from __future__ import annotations

import datetime
import sys
import time

# A status block every this many seconds on a terminal; less often into a file or a pipe.
TTY_PERIOD_S = 5.0
PIPE_PERIOD_S = 30.0
MAX_ROWS = 20
AUTO_COLUMNS = ("training_iteration", "time_total_s")


def _box(rows: list, header: list | None = None) -> str:
    """A table in Ray's rounded box; `rows` of cells (strings)."""
    all_rows = ([header] if header else []) + rows
    widths = [max(len(row[i]) for row in all_rows) for i in range(len(all_rows[0]))]

    def line(row):
        return "│ " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " │"

    width = sum(widths) + 2 * (len(widths) - 1) + 2
    out = ["╭" + "─" * width + "╮"]
    if header:
        out += [line(header), "├" + "─" * width + "┤"]
    out += [line(row) for row in rows]
    out.append("╰" + "─" * width + "╯")
    return "\n".join(out)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value)


class Reporter:
    def __init__(self, runner, stream=None):
        self.runner = runner
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.period = TTY_PERIOD_S if tty else PIPE_PERIOD_S
        self.last = 0.0

    def print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def header(self, total) -> None:
        runner = self.runner
        search = type(getattr(runner.search, "searcher", runner.search)).__name__
        rows = [
            ["Search algorithm", search],
            ["Scheduler", type(runner.scheduler).__name__],
            ["Number of trials", str(total) if total else "?"],
        ]
        self.print(_box(rows, ["Configuration for experiment", runner.experiment_name]))
        self.print(f"\nView detailed results here: {runner.storage.experiment_path}")

    def maybe_status(self) -> None:
        if time.monotonic() - self.last >= self.period:
            self.status()

    def status(self) -> None:
        self.last = time.monotonic()
        runner, trials = self.runner, self.runner.trials
        counts: dict = {}
        for trial in trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        lines = ["", "Trial status: " + " | ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
        elapsed = int(time.monotonic() - self.started)
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"Current time: {now}. Total running time: {elapsed}s")
        used, total = runner.controller.in_use(), runner.capacity
        lines.append(
            f"Logical resource usage: {used.get('CPU', 0.0):.1f}/{total.get('CPU', 0.0):g} CPUs, "
            f"{used.get('GPU', 0.0):.1f}/{total.get('GPU', 0.0):g} GPUs"
        )
        best = self._best()
        if best is not None:
            params = {"/".join(map(str, k)): v for k, v in best.evaluated_params.items()}
            lines.append(
                f"Current best trial: {best.trial_id} with {runner.metric}={best.last_result[runner.metric]} and "
                f"params={params}"
            )
        if trials:
            lines.append(self._table(trials))
        self.print("\n".join(lines))

    def _best(self):
        runner = self.runner
        if not runner.metric or not runner.mode:
            return None
        scored = [t for t in self.runner.trials if isinstance(t.last_result.get(runner.metric), (int, float))]
        if not scored:
            return None
        pick = max if runner.mode == "max" else min
        return pick(scored, key=lambda t: t.last_result[runner.metric])

    def _table(self, trials) -> str:
        params = []
        for trial in trials:
            for key in trial.evaluated_params:
                name = "/".join(map(str, key))
                if name not in params:
                    params.append(name)
        metrics = []
        if self.runner.metric:
            metrics.append(self.runner.metric)
        for trial in trials:
            for key, value in trial.last_result.items():
                if (
                    len(metrics) < 4
                    and key not in metrics
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and key not in _AUTO_KEYS
                ):
                    metrics.append(key)
        header = ["Trial name", "status", *params, "iter", "total time (s)", *metrics]
        rows = []
        shown = sorted(trials, key=lambda t: (t.status != "RUNNING", t.index))[:MAX_ROWS]
        for trial in shown:
            values = {"/".join(map(str, k)): v for k, v in trial.evaluated_params.items()}
            row = [trial.trial_name, trial.status, *[_cell(values.get(p, "")) for p in params]]
            row += [
                str(trial.iteration) if trial.last_result else "",
                f"{trial.time_total:.2f}" if trial.last_result else "",
            ]
            row += [_cell(trial.last_result.get(m, "")) for m in metrics]
            rows.append(row)
        table = _box(rows, header)
        if len(trials) > MAX_ROWS:
            table += f"\n... {len(trials) - MAX_ROWS} more trials not shown"
        return table


_AUTO_KEYS = {
    "timestamp",
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "pid",
    "time_since_restore",
    "iterations_since_restore",
    "done",
}


class LegacyReporterDriver:
    """Drives a `RunConfig(progress_reporter=...)` (Ray's `ProgressReporter`) from the loop in place
    of `Reporter`: `should_report(trials, done)` at each step and `report(trials, done, *sys_info)`
    when it says so; `done=True` at the end."""

    def __init__(self, runner, reporter):
        self.runner = runner
        self.reporter = reporter
        setter = getattr(reporter, "set_search_properties", None)
        if setter is not None and setter(runner.metric, runner.mode) is False:
            raise ValueError(
                f"{type(reporter).__name__}.set_search_properties refused metric={runner.metric!r}, "
                f"mode={runner.mode!r}: expected the reporter and TuneConfig to name the same metric and mode"
            )

    def header(self, total) -> None:
        setup = getattr(self.reporter, "setup", None)
        if setup is None:
            return
        from oxray.tune.progress_reporter import _TableReporter

        kwargs = dict(start_time=time.time(), total_samples=total, metric=self.runner.metric, mode=self.runner.mode)
        if isinstance(self.reporter, _TableReporter):
            kwargs["verbose"] = self.runner.run_config.verbose
        setup(**kwargs)

    def _sys_info(self) -> list:
        runner = self.runner
        debug = getattr(runner.scheduler, "debug_string", None)
        try:
            scheduler = debug() if debug is not None else None
        except NotImplementedError:
            scheduler = None
        scheduler = scheduler or f"Using {type(runner.scheduler).__name__} scheduling algorithm."
        used, total = runner.controller.in_use(), runner.capacity
        resources = (
            f"Logical resource usage: {used.get('CPU', 0.0):.1f}/{total.get('CPU', 0.0):g} CPUs, "
            f"{used.get('GPU', 0.0):.1f}/{total.get('GPU', 0.0):g} GPUs"
        )
        return [scheduler, resources]

    def _maybe_report(self, done: bool) -> None:
        trials = list(self.runner.trials)
        if self.reporter.should_report(trials, done=done):
            self.reporter.report(trials, done, *self._sys_info())

    def maybe_status(self) -> None:
        self._maybe_report(False)

    def status(self) -> None:
        self._maybe_report(True)


def make_reporter(runner):
    """What the loop reports progress through: the run's `progress_reporter` when one is given
    (whatever the verbosity, as Ray's legacy engine calls it), else oxray's status blocks at
    verbosity 1 and above, else nothing."""
    given = runner.run_config.progress_reporter
    if given is not None:
        return LegacyReporterDriver(runner, given)
    return Reporter(runner) if runner.verbose >= 1 else None
