"""Ray Tune's legacy progress reporters (`tune.ProgressReporter`, `tune.CLIReporter`,
`tune.JupyterNotebookReporter`), for `RunConfig(progress_reporter=...)` and
`tune.run(progress_reporter=...)`. The driver loop asks the reporter `should_report(trials, done)`
at each step and, when it says so, calls `report(trials, done, *sys_info)` (the scheduler's
`debug_string()` and the logical resource use); at the end it asks with `done=True`. A reporter
replaces oxray's own status block (its per-trial lines still follow `verbose`).

Unlike Ray 2.60, whose default output engine ignores a passed reporter with a warning (it is
honoured there only with `RAY_AIR_NEW_OUTPUT=0`), oxray always honours it."""

from __future__ import annotations

import datetime
import math
import sys
import time
from typing import Any, Optional

from oxray.tune._internal.metrics import is_number, lookup
from oxray.tune.result import (
    AUTO_RESULT_KEYS,
    EPISODE_REWARD_MEAN,
    MEAN_ACCURACY,
    MEAN_LOSS,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    TRAINING_ITERATION,
)

# Ray's default metric columns, shown when some trial reported them.
DEFAULT_COLUMNS = {
    MEAN_ACCURACY: "acc",
    MEAN_LOSS: "loss",
    TRAINING_ITERATION: "iter",
    TIME_TOTAL_S: "total time (s)",
    TIMESTEPS_TOTAL: "ts",
    EPISODE_REWARD_MEAN: "reward",
}
# The order Ray's table lists trials in, by status.
_STATUS_ORDER = ("RUNNING", "PAUSED", "PENDING", "TERMINATED", "ERROR")


class ProgressReporter:
    """Ray's interface of a progress reporter: subclass it and implement `should_report` and
    `report`; `setup` and `set_search_properties` are called before the first trial starts."""

    def setup(
        self,
        start_time: Optional[float] = None,
        total_samples: Optional[int] = None,
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        **kwargs,
    ) -> None:
        """Called once before the experiment starts."""

    def set_search_properties(self, metric: Optional[str], mode: Optional[str], **kwargs) -> bool:
        """Takes the experiment's metric and mode; False refuses them (the experiment then raises)."""
        return True

    def should_report(self, trials: list, done: bool = False) -> bool:
        """Whether to call `report` now (`done`: the experiment has ended)."""
        raise NotImplementedError(f"{type(self).__name__} must implement ProgressReporter.should_report")

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        """Reports the trials' progress; `sys_info` holds lines about the scheduler and resources."""
        raise NotImplementedError(f"{type(self).__name__} must implement ProgressReporter.report")


def _columns(what: str, columns: Any) -> dict:
    """`columns` (a list of names, or a dict of name to the alias shown) as a dict."""
    if columns is None:
        return {}
    if isinstance(columns, dict):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in columns.items()):
            raise ValueError(f"{what}={columns!r}: expected a dict of metric name to column alias (strings)")
        return dict(columns)
    if isinstance(columns, (list, tuple)) and all(isinstance(c, str) for c in columns):
        return {c: c for c in columns}
    raise ValueError(f"{what}={columns!r}: expected a list of names or a dict of name to column alias")


def _shorten(value: Any, limit: int) -> str:
    """A cell as Ray shows it: floats with 5 significant digits, long text cut from the left."""
    text = f"{value:.5g}" if isinstance(value, float) else ("" if value is None else str(value))
    if len(text) > limit:
        text = "..." + text[-(limit - 3) :]
    return text


def _flat_params(trial) -> dict:
    return {"/".join(map(str, k)): v for k, v in getattr(trial, "evaluated_params", {}).items()}


class _TableReporter(ProgressReporter):
    """What `CLIReporter` and `JupyterNotebookReporter` share (Ray's `TuneReporterBase`)."""

    def __init__(
        self,
        metric_columns: Any = None,
        parameter_columns: Any = None,
        total_samples: Optional[int] = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_column_length: int = 20,
        max_report_frequency: float = 5,
        infer_limit: int = 3,
        print_intermediate_tables: Optional[bool] = None,
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        sort_by_metric: bool = False,
    ):
        name = type(self).__name__
        self._metrics_override = metric_columns is not None
        self._metric_columns = _columns(f"{name}(metric_columns", metric_columns) or dict(DEFAULT_COLUMNS)
        self._parameter_columns = _columns(f"{name}(parameter_columns", parameter_columns)
        for what, value, least in (
            ("max_progress_rows", max_progress_rows, 1),
            ("max_error_rows", max_error_rows, 0),
            ("max_column_length", max_column_length, 4),
            ("infer_limit", infer_limit, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name}({what}={value!r}): expected an integer >= {least}")
        if (
            isinstance(max_report_frequency, bool)
            or not isinstance(max_report_frequency, (int, float))
            or max_report_frequency < 0
        ):
            raise ValueError(f"{name}(max_report_frequency={max_report_frequency!r}): expected seconds >= 0")
        if total_samples is not None and (not isinstance(total_samples, int) or total_samples < 0):
            raise ValueError(f"{name}(total_samples={total_samples!r}): expected None or an integer >= 0")
        if print_intermediate_tables not in (None, True, False):
            raise ValueError(f"{name}(print_intermediate_tables={print_intermediate_tables!r}): expected a bool")
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"{name}(mode={mode!r}): expected 'min' or 'max'")
        if metric is not None and not isinstance(metric, str):
            raise ValueError(f"{name}(metric={metric!r}): expected the name of a reported metric")
        self._total_samples = total_samples
        self._max_progress_rows = max_progress_rows
        self._max_error_rows = max_error_rows
        self._max_column_length = max_column_length
        self._max_report_frequency = max_report_frequency
        self._infer_limit = infer_limit
        self._print_intermediate_tables = print_intermediate_tables
        self._metric, self._mode = metric, mode
        self._sort_by_metric = bool(sort_by_metric)
        self._start_time = time.time()
        self._last_report_time = 0.0
        # The experiment's verbosity (RunConfig(verbose=)), set by `setup`; Ray's legacy default 3.
        self._verbose = 3

    # Ray's public methods.

    def setup(self, start_time=None, total_samples=None, metric=None, mode=None, **kwargs) -> None:
        self._start_time = start_time or time.time()
        self._last_report_time = 0.0
        if self._total_samples is None:
            self._total_samples = total_samples
        if "verbose" in kwargs and kwargs["verbose"] is not None:
            self._verbose = kwargs["verbose"]
        self.set_search_properties(metric, mode)

    def set_search_properties(self, metric, mode, **kwargs) -> bool:
        if (self._metric and metric and metric != self._metric) or (self._mode and mode and mode != self._mode):
            raise ValueError(
                f"You passed metric={metric!r}/mode={mode!r} to the experiment (TuneConfig or tune.run), but the "
                f"{type(self).__name__} was created with metric={self._metric!r}/mode={self._mode!r}: expected "
                "them in one place only; remove them from the reporter or from the experiment"
            )
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def set_total_samples(self, total_samples: int) -> None:
        self._total_samples = total_samples

    def add_metric_column(self, metric: str, representation: Optional[str] = None) -> None:
        """Shows `metric` (under `representation`) in the table."""
        self._metrics_override = True
        if metric in self._metric_columns:
            raise ValueError(f"add_metric_column({metric!r}): the column is already there")
        self._metric_columns[metric] = representation or metric

    def add_parameter_column(self, parameter: str, representation: Optional[str] = None) -> None:
        """Shows the config key `parameter` (`a/b` for a nested one) under `representation`."""
        if parameter in self._parameter_columns:
            raise ValueError(f"add_parameter_column({parameter!r}): the column is already there")
        self._parameter_columns[parameter] = representation or parameter

    def should_report(self, trials: list, done: bool = False) -> bool:
        now = time.time()
        if now - self._last_report_time > self._max_report_frequency:
            self._last_report_time = now
            return True
        return done

    # The text.

    def _intermediate_tables(self) -> bool:
        if self._print_intermediate_tables is None:
            return self._verbose >= 3
        return self._print_intermediate_tables

    def _metric_keys(self, trials: list) -> dict:
        """The metric columns to show: those given (or Ray's defaults plus up to `infer_limit`
        metrics the trials report), of which some trial reported a value."""
        columns = dict(self._metric_columns)
        if not self._metrics_override:
            for trial in trials:
                for key, value in trial.last_result.items():
                    if len(columns) - len(DEFAULT_COLUMNS) >= self._infer_limit:
                        break
                    if key not in columns and key not in AUTO_RESULT_KEYS and is_number(value):
                        columns[key] = key
            if self._metric and self._metric not in columns:
                columns[self._metric] = self._metric
        return {k: v for k, v in columns.items() if any(lookup(t.last_result, k) is not None for t in trials)}

    def _parameter_keys(self, trials: list) -> dict:
        if self._parameter_columns:
            return dict(self._parameter_columns)
        keys: dict = {}
        for trial in trials:
            for key in _flat_params(trial):
                keys.setdefault(key, key)
        return keys

    def _best(self, trials: list):
        if not self._metric or not self._mode:
            return None
        best, best_value = None, None
        for trial in trials:
            value = lookup(trial.last_result, self._metric)
            if not is_number(value) or (isinstance(value, float) and math.isnan(value)):
                continue
            if best is None or (value > best_value if self._mode == "max" else value < best_value):
                best, best_value = trial, value
        return best

    def _shown(self, trials: list, done: bool) -> tuple:
        """The trials of the table (in Ray's order: by status, the terminated ones by the metric
        with `sort_by_metric`), at most `max_progress_rows` of them unless `done`; and the count
        of the others by status."""
        by_status: dict = {}
        for trial in trials:
            by_status.setdefault(trial.status, []).append(trial)
        if self._sort_by_metric and self._metric and self._mode and "TERMINATED" in by_status:
            scored = [t for t in by_status["TERMINATED"] if is_number(lookup(t.last_result, self._metric))]
            rest = [t for t in by_status["TERMINATED"] if t not in scored]
            scored.sort(key=lambda t: lookup(t.last_result, self._metric), reverse=self._mode == "max")
            by_status["TERMINATED"] = scored + rest
        order = [s for s in _STATUS_ORDER if s in by_status] + sorted(s for s in by_status if s not in _STATUS_ORDER)
        limit = None if done else self._max_progress_rows
        if limit is None or len(trials) <= limit:
            return [t for s in order for t in by_status[s]], {}
        # Ray's fair share: each status gets rows in turn, so none is left out while rows remain.
        quota = dict.fromkeys(order, 0)
        left = limit
        while left > 0:
            for status in order:
                if left > 0 and quota[status] < len(by_status[status]):
                    quota[status] += 1
                    left -= 1
        shown = [t for s in order for t in by_status[s][: quota[s]]]
        hidden = {s: len(by_status[s]) - quota[s] for s in order if len(by_status[s]) > quota[s]}
        return shown, hidden

    def _rows(self, trials: list, done: bool) -> tuple:
        """(header, rows, hidden counts) of the trials' table."""
        params, metrics = self._parameter_keys(trials), self._metric_keys(trials)
        limit = self._max_column_length
        with_loc = any(t.last_result.get("pid") is not None for t in trials)
        header = ["Trial name", "status", *(["loc"] if with_loc else [])]
        header += [_shorten(alias, limit) for alias in params.values()]
        header += [_shorten(alias, limit) for alias in metrics.values()]
        shown, hidden = self._shown(trials, done)
        rows = []
        for trial in shown:
            row = [str(trial), trial.status]
            if with_loc:
                result = trial.last_result
                ip = result.get("node_ip") or result.get("hostname")
                row.append(f"{ip}:{result['pid']}" if result.get("pid") is not None else "")
            values = _flat_params(trial)
            for key in params:
                value = values[key] if key in values else lookup(trial.config, key)
                row.append(_shorten(value, limit))
            row += [_shorten(lookup(trial.last_result, key), limit) for key in metrics]
            rows.append(row)
        return header, rows, hidden

    def _progress_lines(self, trials: list, done: bool, sys_info: tuple) -> list:
        elapsed = datetime.timedelta(seconds=int(time.time() - self._start_time))
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        lines = ["== Status ==", f"Current time: {now} (running for {elapsed})", *sys_info]
        best = self._best(trials)
        if best is not None:
            params = self._parameter_keys([best])
            values = _flat_params(best)
            shown = {k: values.get(k, lookup(best.config, k)) for k in params}
            lines.append(
                f"Current best trial: {best.trial_id} with {self._metric}={lookup(best.last_result, self._metric)} "
                f"and parameters={shown}"
            )
        counts: dict = {}
        for trial in trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        total = f"/{self._total_samples}" if self._total_samples else ""
        states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        lines.append(f"Number of trials: {len(trials)}{total} ({states})")
        return lines

    def _errors(self, trials: list, done: bool) -> tuple:
        errored = [t for t in trials if t.status == "ERROR"]
        limit = None if done else self._max_error_rows
        shown = errored if limit is None else errored[:limit]
        rows = [[str(t), str(t.num_failures), str(t.error_file or "")] for t in shown]
        return errored, rows


class CLIReporter(_TableReporter):
    """Ray's `CLIReporter`: prints a status block and a table of the trials (parameters and
    metrics) to stdout, at most every `max_report_frequency` seconds and at the end."""

    def _progress_str(self, trials: list, done: bool, *sys_info: str) -> str:
        from oxray.tune._internal.output import _box

        lines = self._progress_lines(trials, done, sys_info)
        if trials and (self._intermediate_tables() or (done and self._verbose >= 2)):
            header, rows, hidden = self._rows(trials, done)
            lines.append(_box(rows, header))
            if hidden:
                more = ", ".join(f"{n} {s}" for s, n in hidden.items())
                lines.append(f"... {sum(hidden.values())} more trials not shown ({more})")
        errored, rows = self._errors(trials, done)
        if errored:
            lines.append(f"Number of errored trials: {len(errored)}")
            if rows:
                lines.append(_box(rows, ["Trial name", "# failures", "error file"]))
            if len(rows) < len(errored):
                lines.append(f"... {len(errored) - len(rows)} more errored trials not shown")
        return "\n".join(lines) + "\n"

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        print(self._progress_str(trials, done, *sys_info), file=sys.stdout, flush=True)


class JupyterNotebookReporter(_TableReporter):
    """Ray's `JupyterNotebookReporter`: the same status and table as `CLIReporter`, as HTML shown
    in the notebook's output cell (replacing the previous one with `overwrite=True`). Needs
    IPython."""

    def __init__(
        self,
        overwrite: bool = True,
        metric_columns: Any = None,
        parameter_columns: Any = None,
        total_samples: Optional[int] = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_column_length: int = 20,
        max_report_frequency: float = 5,
        infer_limit: int = 3,
        print_intermediate_tables: Optional[bool] = None,
        display: Optional[str] = None,
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        sort_by_metric: bool = False,
    ):
        import importlib.util

        if importlib.util.find_spec("IPython") is None:
            raise ImportError(
                "JupyterNotebookReporter needs IPython (pip install ipython); use tune.CLIReporter outside a notebook"
            )
        super().__init__(
            metric_columns=metric_columns,
            parameter_columns=parameter_columns,
            total_samples=total_samples,
            max_progress_rows=max_progress_rows,
            max_error_rows=max_error_rows,
            max_column_length=max_column_length,
            max_report_frequency=max_report_frequency,
            infer_limit=infer_limit,
            print_intermediate_tables=print_intermediate_tables,
            metric=metric,
            mode=mode,
            sort_by_metric=sort_by_metric,
        )
        if overwrite not in (True, False):
            raise ValueError(f"JupyterNotebookReporter(overwrite={overwrite!r}): expected a bool")
        if display is not None and not isinstance(display, str):
            raise ValueError(f"JupyterNotebookReporter(display={display!r}): expected None or a display id")
        self._overwrite = overwrite
        self._display = display
        self._handle = None

    def _progress_html(self, trials: list, done: bool, *sys_info: str) -> str:
        import html

        parts = ["<br>".join(html.escape(line) for line in self._progress_lines(trials, done, sys_info))]

        def table(header, rows):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
            return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

        if trials and (self._intermediate_tables() or (done and self._verbose >= 2)):
            header, rows, hidden = self._rows(trials, done)
            parts.append(table(header, rows))
            if hidden:
                more = ", ".join(f"{n} {s}" for s, n in hidden.items())
                parts.append(html.escape(f"... {sum(hidden.values())} more trials not shown ({more})"))
        errored, rows = self._errors(trials, done)
        if errored:
            parts.append(f"Number of errored trials: {len(errored)}")
            if rows:
                parts.append(table(["Trial name", "# failures", "error file"], rows))
        return "<br>".join(parts)

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        from IPython.display import HTML, clear_output, display

        text = self._progress_html(trials, done, *sys_info)
        if self._display is not None:
            if self._handle is None:
                self._handle = display(HTML(text), display_id=self._display)
            else:
                self._handle.update(HTML(text))
            return
        if self._overwrite:
            clear_output(wait=True)
        display(HTML(text))


__all__ = ["CLIReporter", "JupyterNotebookReporter", "ProgressReporter"]
