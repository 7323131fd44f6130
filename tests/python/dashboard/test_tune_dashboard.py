"""Tune experiments on the dashboard, in headless Chromium: an experiment's page
fills with its trials (parameters, status, iterations, metric, error) and its
charts (a parameter against the metric, a curve per trial) while it runs, and
shows how it ended; `/metrics` counts its trials by state; a trial that runs a
Train run links to that run's page."""

import json
import os
import re
import threading

import pytest
from playwright.sync_api import expect

import oxray as ray
from oxray import train, tune
from oxray_testutil import http_call, wait_until

pytestmark = pytest.mark.timeout(240)


def gated(config):
    """Reports once, waits for the test's gate, reports twice more; the lr=1.0 trial fails instead."""
    import time as clock

    tune.report({"loss": config["lr"] * 10, "acc": 1 - config["lr"] / 2})
    while not os.path.exists(config["gate"]):
        clock.sleep(0.05)
    if config["lr"] == 1.0:
        raise ValueError("diverged at lr=1.0")
    for step in (2, 3):
        tune.report({"loss": config["lr"] * 10 / step, "acc": 1 - config["lr"] / (2 * step)})


def open_experiment(browser, head, name):
    page = browser.new_context().new_page()
    page.goto(f"{head.dashboard_url}/?token={head.token}")
    expect(page).to_have_url(re.compile(r"/overview$"))
    page.click("nav a[href='/tune']")
    link = page.get_by_role("link", name=name)
    expect(link).to_be_visible(timeout=60_000)
    link.click()
    expect(page.locator("#experiment-name")).to_have_text(name)
    return page


def trials_metric(head, state):
    """`oxray_tune_trials{...,State=state}` of the running experiment, or None."""
    status, text = http_call("GET", f"{head.dashboard_url}/metrics", token=head.token)
    assert status == 200, text
    found = re.search(rf'^oxray_tune_trials\{{[^}}]*State="{state}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def test_an_experiments_page_shows_its_trials_and_charts_while_it_runs(
    head, browser, tmp_path, screenshots, console_errors
):
    ray.init(address=head.address)
    gate = tmp_path / "gate"
    outcome = []
    tuner = tune.Tuner(
        gated,
        param_space={
            "lr": tune.grid_search([0.01, 0.1, 1.0]),
            "optimizer": tune.grid_search(["sgd", "adam"]),
            "gate": str(gate),
        },
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name="dash", storage_path=str(tmp_path / "results"), verbose=0),
    )
    fitting = threading.Thread(target=lambda: outcome.append(tuner.fit()), daemon=True)
    fitting.start()
    page = open_experiment(browser, head, "dash")
    errors = console_errors(page)
    expect(page.locator("#experiment-status")).to_have_text("RUNNING")
    # Two CPUs: two trials run (each reported once and waits), the other four wait their turn.
    expect(page.locator("#param-chart")).to_have_attribute("data-points", "2", timeout=90_000)
    expect(page.locator("#trials .state.RUNNING")).to_have_count(2)
    expect(page.locator("#trials tr.trial")).to_have_count(6, timeout=30_000)
    # The sampled parameters are the columns; a constant (the gate's path) is not one.
    expect(page.locator("#trials th.param")).to_have_text(["lr", "optimizer"])
    wait_until("/metrics to count two running trials", lambda: trials_metric(head, "RUNNING") == 2.0, timeout=30)
    assert trials_metric(head, "PENDING") == 4.0
    gate.write_text("")
    expect(page.locator("#experiment-status")).to_have_text("FINISHED", timeout=120_000)
    expect(page.locator("#trials .state.TERMINATED")).to_have_count(4)
    errored = page.locator("#trials tr.trial", has=page.locator(".state.ERROR"))
    expect(errored).to_have_count(2)
    expect(errored.first).to_contain_text("ValueError: diverged at lr=1.0")
    expect(page.locator("#experiment-best")).to_have_text("0.0333")  # lr=0.01 at its third report
    # Every trial's last loss against lr; the errored ones have their one report.
    page.select_option("#param", "lr")
    expect(page.locator("#param-chart")).to_have_attribute("data-points", "6")
    curves = page.locator("#curve-chart")
    expect(curves).to_have_attribute("data-trials", "6")
    expect(curves).to_have_attribute("data-points", str(4 * 3 + 2 * 1))
    # A categorical parameter is drawn too.
    page.select_option("#param", "optimizer")
    expect(page.locator("#param-chart")).to_have_attribute("data-points", "6")
    expect(page.locator("#param-chart canvas")).to_be_visible()
    page.screenshot(path=screenshots("tune_experiment"), full_page=True)
    page.click("nav a[href='/tune']")
    expect(page.locator("#experiments tbody tr")).to_contain_text("4 TERMINATED")
    page.screenshot(path=screenshots("tune"), full_page=True)
    assert errors.seen == []
    fitting.join(60)
    assert outcome and outcome[0].num_errors == 2

    status, body = http_call("GET", f"{head.dashboard_url}/api/oxray/tune/experiments", token=head.token)
    [experiment] = json.loads(body)["experiments"]
    assert status == 200 and experiment["status"] == "FINISHED" and experiment["metric"] == "loss"
    assert sorted(t["config"]["lr"] for t in experiment["trials"]) == [0.01, 0.01, 0.1, 0.1, 1.0, 1.0]
    status, text = http_call("GET", f"{head.dashboard_url}/metrics", token=head.token)
    assert 'oxray_tune_experiments{Status="FINISHED"} 1' in text
    assert "oxray_tune_trials{" not in text, "only running experiments have trial series"


def train_loop(config):
    train.report({"loss": config["lr"]})


def with_a_train_run(config):
    from oxray.train.torch import TorchTrainer
    from oxray.tune.integration.ray_train import TuneReportCallback

    TorchTrainer(
        train_loop,
        train_loop_config={"lr": config["lr"]},
        scaling_config=train.ScalingConfig(num_workers=1),
        run_config=train.RunConfig(
            name=f"run-of-{tune.get_context().get_trial_id()}",
            storage_path=config["storage"],
            callbacks=[TuneReportCallback()],
        ),
    ).fit()


def test_a_trials_train_run_is_linked_from_the_experiments_page(head, browser, tmp_path):
    pytest.importorskip("torch")
    ray.init(address=head.address)
    [result] = tune.Tuner(
        with_a_train_run,
        param_space={"lr": 0.5, "storage": str(tmp_path / "train")},
        run_config=tune.RunConfig(name="with-train", storage_path=str(tmp_path / "results"), verbose=0),
    ).fit()
    assert result.error is None and result.metrics["loss"] == 0.5
    page = open_experiment(browser, head, "with-train")
    link = page.locator("#trials a.train-run")
    expect(link).to_have_count(1)
    name = link.text_content()
    assert name.startswith("run-of-") and name.removeprefix("run-of-") in page.locator("#trials").text_content()
    link.click()
    expect(page.locator("#run-name")).to_have_text(name)
    expect(page.locator("#run-status")).to_have_text("FINISHED")
