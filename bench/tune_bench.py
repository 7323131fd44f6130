#!/usr/bin/env python3
"""Tune benchmark: oxray.tune vs. Ray Tune 2.60, same machine, one run.

    python bench/tune_bench.py                   # both sides
    python bench/tune_bench.py --side oxray      # one side

Figures (2 CPUs, each side in its own subprocess, cluster started before the clock):
- trivial trials: function trials of one report each, default settings (Ray: a new
  actor per trial; oxray: its default, idle actors reused); trials/s over the whole fit().
  Ray runs fewer trials (--ray-trials), its rate is per trial all the same.
- first result: from calling fit() to the first on_trial_result callback.
- idle trial actor PSS: two trials that wait on a file; the PSS of each trial's
  process (its pid reported), and of the whole process tree (driver and descendants).
- Tune + Train: two trials, each a TorchTrainer of one worker; seconds from the trial
  function's start to its Train worker's loop start (mean), in the first such experiment
  and in a second one. It runs in a process of its own shaped as Ray's Train + Tune guide
  (torch and the Train modules imported, then init, then fit). Ray needs
  max_concurrent_trials=1 on 2 CPUs (else its trials hold the CPUs their workers wait for).
- OptunaSearch: seconds per trial of 100 trials of a trivial objective under OptunaSearch
  (TPE, seeded), against Optuna's own `study.optimize` on the same objective, measured in the
  same process just before with the cluster idle; oxray runs 5 such rounds and reports the
  median ratio (this machine's speed drifts between runs by more than the effect measured).
  Ray runs --ray-trials / 2 trials, once.
Run it on an installed wheel: a source tree under PYTHONDONTWRITEBYTECODE compiles oxray's
modules in every process (the script says so), which a pip-installed wheel never does.
See bench/README.md (Tune).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def trivial(config):
    import importlib

    tune = importlib.import_module(config["framework"] + ".tune")
    tune.report({"x": config["i"]})


def waiting(config):
    import importlib

    tune = importlib.import_module(config["framework"] + ".tune")
    with open(os.path.join(config["dir"], f"pid-{config['i']}"), "w") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(os.path.join(config["dir"], "go")):
        time.sleep(0.05)
    tune.report({"x": 1})


def train_worker(config):
    import importlib

    train = importlib.import_module(config["framework"] + ".train")
    train.report({"worker_start": time.time()})


def train_driver(config):
    import importlib

    trial_start = time.time()
    fw = config["framework"]
    tune = importlib.import_module(fw + ".tune")
    train = importlib.import_module(fw + ".train")
    torch_mod = importlib.import_module(fw + ".train.torch")
    callback = importlib.import_module(fw + ".tune.integration.ray_train").TuneReportCallback
    torch_mod.TorchTrainer(
        train_worker,
        train_loop_config={"framework": fw},
        scaling_config=train.ScalingConfig(num_workers=1),
        run_config=train.RunConfig(
            name=f"train-trial_id={tune.get_context().get_trial_id()}",
            storage_path=config["storage"],
            callbacks=[callback()],
        ),
    ).fit()
    # Recorded by the driver from the forwarded report.
    with open(os.path.join(config["storage"], f"start-{tune.get_context().get_trial_id()}"), "w") as f:
        f.write(str(trial_start))


def quadratic(config):
    import importlib

    tune = importlib.import_module(config.pop("framework") + ".tune")
    tune.report({"loss": (config["x"] - 2) ** 2 + (config["y"] + 1) ** 2})


# Rounds of (Optuna alone, OptunaSearch) on the oxray side; the median ratio is reported.
OPTUNA_ROUNDS = 5


def optuna_alone_s_per_trial(trials: int) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    start = time.perf_counter()
    study.optimize(
        lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2 + (t.suggest_float("y", -10, 10) + 1) ** 2,
        n_trials=trials,
    )
    return (time.perf_counter() - start) / trials


def framework_without_bytecode() -> bool:
    """Whether oxray's Tune modules load from source each time (no valid .pyc beside them)."""
    import importlib.util

    spec = importlib.util.find_spec("oxray.tune._internal.runner")
    if spec is None or not spec.cached or not spec.origin:
        return True
    return not os.path.exists(spec.cached) or os.path.getmtime(spec.cached) < os.path.getmtime(spec.origin)


def pss_mib(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_full_info().pss / 2**20


def tree_pss_mib(root: int) -> float:
    import psutil

    total = 0.0
    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass
    return total / 2**20


def side(framework: str, trials: int) -> dict:
    """One framework's figures; its experiments' directories are removed afterwards."""
    import shutil

    scratch = tempfile.mkdtemp(prefix=f"tune-bench-{framework}-")
    try:
        return _measure(framework, trials, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _measure(framework: str, trials: int, scratch: str) -> dict:
    if framework == "ray":
        os.environ["RAY_TRAIN_V2_ENABLED"] = "1"
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    import importlib

    ray = importlib.import_module(framework)
    tune = importlib.import_module(framework + ".tune")
    kwargs = {"num_cpus": 2}
    if framework == "ray":
        kwargs.update(include_dashboard=False, logging_level="ERROR")
    ray.init(**kwargs)
    out = {}
    storage = os.path.join(scratch, "experiments")
    first = []

    class First(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            if not first:
                first.append(time.perf_counter())

    start = time.perf_counter()
    tune.Tuner(
        trivial,
        param_space={"framework": framework, "i": tune.grid_search(list(range(trials)))},
        run_config=tune.RunConfig(storage_path=storage, name="trivial", verbose=0, callbacks=[First()]),
    ).fit()
    wall = time.perf_counter() - start
    out["trivial_trials"] = trials
    out["trivial_trials_per_s"] = trials / wall
    out["first_result_s"] = first[0] - start

    # Two idle trials: their processes' PSS, and the whole tree's.
    wait_dir = tempfile.mkdtemp(dir=scratch)
    import threading

    done = threading.Event()

    def run_waiting():
        tune.Tuner(
            waiting,
            param_space={"framework": framework, "dir": wait_dir, "i": tune.grid_search([0, 1])},
            run_config=tune.RunConfig(storage_path=storage, name="idle", verbose=0),
        ).fit()
        done.set()

    threading.Thread(target=run_waiting, daemon=True).start()
    deadline = time.time() + 120
    while not all(os.path.exists(os.path.join(wait_dir, f"pid-{i}")) for i in (0, 1)):
        if time.time() > deadline:
            raise RuntimeError("the idle trials never started")
        time.sleep(0.1)
    time.sleep(2)  # let both settle into their wait
    pids = [int(open(os.path.join(wait_dir, f"pid-{i}")).read()) for i in (0, 1)]
    out["trial_actor_pss_mib"] = sum(pss_mib(p) for p in pids) / 2
    out["tree_pss_mib"] = tree_pss_mib(os.getpid())
    open(os.path.join(wait_dir, "go"), "w").close()
    done.wait(120)

    # OptunaSearch: seconds per trial, against Optuna alone measured in this process just before
    # (the cluster idle), in alternating rounds: the machine's speed drifts more between runs
    # than the difference measured.
    try:
        optuna_search = importlib.import_module(framework + ".tune.search.optuna").OptunaSearch
    except ImportError:
        optuna_search = None
    if optuna_search is not None:
        import statistics

        optuna_trials = 100 if framework == "oxray" else max(5, trials // 2)
        per_trial, alone, ratios = [], [], []
        for round_index in range(OPTUNA_ROUNDS if framework == "oxray" else 1):
            alone.append(optuna_alone_s_per_trial(100))
            start = time.perf_counter()
            tune.Tuner(
                quadratic,
                param_space={"framework": framework, "x": tune.uniform(-10, 10), "y": tune.uniform(-10, 10)},
                tune_config=tune.TuneConfig(
                    metric="loss", mode="min", search_alg=optuna_search(seed=0), num_samples=optuna_trials
                ),
                run_config=tune.RunConfig(storage_path=storage, name=f"optuna-{round_index}", verbose=0),
            ).fit()
            per_trial.append((time.perf_counter() - start) / optuna_trials)
            ratios.append(per_trial[-1] / alone[-1])
        out["optuna_s_per_trial"] = statistics.median(per_trial)
        out["optuna_alone_s_per_trial"] = statistics.median(alone)
        out["optuna_vs_alone"] = statistics.median(ratios)
        out["optuna_vs_alone_range"] = [min(ratios), max(ratios)]
        out["optuna_trials"] = optuna_trials

    return out


def train_side(framework: str) -> dict:
    """Tune + Train, in a process of its own shaped as Ray's Train + Tune guide: torch and the
    Train modules imported first, then the cluster, then the experiments."""
    import importlib
    import shutil

    try:
        import torch  # noqa: F401
    except ImportError:
        return {}
    if framework == "ray":
        os.environ["RAY_TRAIN_V2_ENABLED"] = "1"
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray = importlib.import_module(framework)
    tune = importlib.import_module(framework + ".tune")
    importlib.import_module(framework + ".train.torch")
    kwargs = {"num_cpus": 2}
    if framework == "ray":
        kwargs.update(include_dashboard=False, logging_level="ERROR")
    ray.init(**kwargs)
    scratch = tempfile.mkdtemp(prefix=f"tune-bench-train-{framework}-")
    out = {}
    try:
        # Twice: the first experiment on this node, then another (Ray starts fresh workers each time).
        for key in ("train_workers_after_trial_start_s", "train_workers_second_experiment_s"):
            train_storage = tempfile.mkdtemp(dir=scratch)
            tune_config = tune.TuneConfig(max_concurrent_trials=1) if framework == "ray" else tune.TuneConfig()
            results = tune.Tuner(
                train_driver,
                param_space={"framework": framework, "storage": train_storage, "i": tune.grid_search([0, 1])},
                tune_config=tune_config,
                run_config=tune.RunConfig(storage_path=os.path.join(scratch, "experiments"), name=key, verbose=0),
            ).fit()
            delays = []
            for r in results:
                trial_id = r.metrics["trial_id"]
                started = float(open(os.path.join(train_storage, f"start-{trial_id}")).read())
                delays.append(r.metrics["worker_start"] - started)
            out[key] = sum(delays) / len(delays)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=["oxray", "ray"])
    parser.add_argument("--part", choices=["tune", "train"], default="tune")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--ray-trials", type=int, default=20)
    args = parser.parse_args()
    if args.side:
        trials = args.ray_trials if args.side == "ray" else args.trials
        figures = side(args.side, trials) if args.part == "tune" else train_side(args.side)
        print("RESULT " + json.dumps(figures), flush=True)
        return
    figures = {}
    for name in ("oxray", "ray"):
        figures[name] = {}
        for part in ("tune", "train"):
            cmd = [sys.executable, __file__, "--side", name, "--part", part]
            cmd += ["--trials", str(args.trials), "--ray-trials", str(args.ray_trials)]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=1800)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{name} ({part}) failed")
            figures[name].update(json.loads(lines[-1][len("RESULT ") :]))
    rows = [
        ("trivial trials/s (default settings)", "trivial_trials_per_s", "{:.2f}", "higher"),
        ("first result after fit() (s)", "first_result_s", "{:.3f}", "lower"),
        ("idle trial actor PSS (MiB)", "trial_actor_pss_mib", "{:.1f}", "lower"),
        ("process tree PSS, 2 idle trials (MiB)", "tree_pss_mib", "{:.0f}", "lower"),
        ("Train workers after trial start (s)", "train_workers_after_trial_start_s", "{:.2f}", "lower"),
        ("the same, a second experiment (s)", "train_workers_second_experiment_s", "{:.2f}", "lower"),
    ]
    print("| | oxray | Ray 2.60 | oxray vs Ray |\n| --- | ---: | ---: | ---: |")
    for label, key, fmt, better in rows:
        o, r = figures["oxray"].get(key), figures["ray"].get(key)
        if o is None or r is None:
            continue
        ratio = o / r if better == "higher" else r / o
        print(f"| {label} | {fmt.format(o)} | {fmt.format(r)} | {ratio:.1f}x |")
    print(f"(oxray ran {figures['oxray']['trivial_trials']} trivial trials, Ray {figures['ray']['trivial_trials']})")
    if "optuna_s_per_trial" in figures["oxray"]:
        o, r = figures["oxray"], figures["ray"]
        low, high = o["optuna_vs_alone_range"]
        print(
            f"OptunaSearch, s per trial: oxray {o['optuna_s_per_trial']:.4f}, {o['optuna_vs_alone']:.2f}x Optuna "
            f"alone ({o['optuna_alone_s_per_trial']:.4f}; median of {OPTUNA_ROUNDS} rounds, {low:.2f}x to {high:.2f}x)"
            + (
                f"; Ray {r['optuna_s_per_trial']:.4f}, {r['optuna_vs_alone']:.0f}x Optuna alone "
                f"({r['optuna_alone_s_per_trial']:.4f}; {r['optuna_trials']} trials)"
                if "optuna_s_per_trial" in r
                else ""
            )
        )
    if framework_without_bytecode():
        print(
            "NOTE: oxray's modules were imported without cached bytecode (PYTHONDONTWRITEBYTECODE, or sources "
            "newer than their .pyc): every process pays their compilation, which a pip-installed wheel does not"
        )


if __name__ == "__main__":
    main()
