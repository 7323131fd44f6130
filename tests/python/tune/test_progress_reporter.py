"""`RunConfig(progress_reporter=...)`: Ray's `CLIReporter` (its columns, aliases, row limit,
metric sort, report frequency and the experiment's metric), and a `ProgressReporter` of the
user's own, whose `should_report` and `report` the driver loop calls."""

import re

import pytest

from oxray import tune

pytestmark = pytest.mark.usefixtures("cluster")


def trainable(config):
    for step in range(2):
        tune.report({"loss": config["x"] * 10 + step, "other": 0.5, "nested": {"m": config["x"]}})
    if config["x"] == 4:
        raise ValueError("fails on purpose")


class Recording(tune.ProgressReporter):
    def __init__(self):
        self.setups, self.asked, self.reports = [], [], []

    def setup(self, start_time=None, total_samples=None, metric=None, mode=None, **kwargs):
        self.setups.append((total_samples, metric, mode))

    def should_report(self, trials, done=False):
        self.asked.append(done)
        return done or len(self.asked) % 2 == 0

    def report(self, trials, done, *sys_info):
        self.reports.append(([(t.config["x"], t.status) for t in trials], done, sys_info))


def run(tmp_path, name, reporter, xs=(1, 2, 3), **tune_config):
    return tune.Tuner(
        trainable,
        param_space={"x": tune.grid_search(list(xs))},
        tune_config=tune.TuneConfig(**tune_config),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0, progress_reporter=reporter),
    ).fit()


def test_a_reporter_of_ones_own_is_asked_at_each_step_and_called_when_it_says(tmp_path):
    reporter = Recording()
    run(tmp_path, "own", reporter, metric="loss", mode="min")
    assert reporter.setups == [(3, "loss", "min")]
    assert reporter.asked[-1] is True and reporter.asked.count(True) == 1
    # Called on every other step (as should_report said) and once at the end.
    assert len(reporter.reports) == len(reporter.asked) // 2 + (len(reporter.asked) % 2)
    trials, done, sys_info = reporter.reports[-1]
    assert done is True and sorted(trials) == [(1, "TERMINATED"), (2, "TERMINATED"), (3, "TERMINATED")]
    assert sys_info[0] == "Using FIFO scheduling algorithm." and sys_info[1].startswith("Logical resource usage:")


def test_cli_reporter_prints_the_columns_asked_with_their_aliases(tmp_path, capfd):
    reporter = tune.CLIReporter(
        metric_columns={"loss": "LOSS", "nested/m": "M"},
        parameter_columns={"x": "X"},
        max_report_frequency=3600,
        print_intermediate_tables=True,
        sort_by_metric=True,
        max_progress_rows=2,
        metric="loss",
        mode="max",
    )
    run(tmp_path, "cli", reporter, xs=(1, 2, 3, 4))
    out = capfd.readouterr().out
    blocks = out.split("== Status ==")[1:]
    # max_report_frequency of an hour: the first step and the end only.
    assert len(blocks) == 2, out
    final = blocks[-1]
    assert "Number of trials: 4/4 (1 ERROR, 3 TERMINATED)" in final
    # As Ray's, the best by the last results of all trials, the errored one too.
    assert "Current best trial:" in final and "with loss=41 and parameters={'x': 4}" in final
    header = next(line for line in final.splitlines() if "Trial name" in line)
    assert re.search(r"Trial name\s+status\s+loc\s+X\s+LOSS\s+M", header), header
    assert "other" not in header, "only the metric columns asked for"
    rows = [line for line in final.splitlines() if line.startswith("│ trainable_") and "# failures" not in line]
    # sort_by_metric with mode max: the terminated trials best first; at the end every row is shown.
    assert [int(re.search(r"_0000(\d)", r).group(1)) for r in rows if "TERMINATED" in r] == [2, 1, 0]
    assert len([r for r in rows if "ERROR" in r]) == 1 and len([r for r in rows if "error.txt" in r]) == 1
    assert "Number of errored trials: 1" in final and "error.txt" in final
    # The first block came while trials ran: at most max_progress_rows rows.
    first_rows = [line for line in blocks[0].splitlines() if line.startswith("│ trainable_")]
    assert 0 < len(first_rows) <= 2, blocks[0]


def test_cli_reporter_without_intermediate_tables_prints_the_table_only_at_the_end(tmp_path, capfd):
    reporter = tune.CLIReporter(max_report_frequency=0, print_intermediate_tables=False)
    run(tmp_path, "quiet", reporter, xs=(1,))
    blocks = capfd.readouterr().out.split("== Status ==")[1:]
    assert len(blocks) >= 2
    assert all("Trial name" not in b for b in blocks), "verbose=0: no table, as Ray's legacy engine"


def test_reporter_options_are_checked_and_a_conflicting_metric_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"metric_columns=3"):
        tune.CLIReporter(metric_columns=3)
    with pytest.raises(ValueError, match=r"max_progress_rows=0"):
        tune.CLIReporter(max_progress_rows=0)
    with pytest.raises(ValueError, match=r"mode='best'"):
        tune.CLIReporter(mode="best")
    with pytest.raises(ValueError, match="expected a tune.ProgressReporter"):
        tune.RunConfig(progress_reporter=object())
    with pytest.raises(ValueError, match="expected them in one place only"):
        run(tmp_path, "conflict", tune.CLIReporter(metric="other", mode="max"), metric="loss", mode="min")


def test_the_reporters_import_from_rays_module_paths():
    from oxray.tune.progress_reporter import CLIReporter, JupyterNotebookReporter, ProgressReporter

    assert (CLIReporter, JupyterNotebookReporter, ProgressReporter) == (
        tune.CLIReporter,
        tune.JupyterNotebookReporter,
        tune.ProgressReporter,
    )
