"""Which worker template forks a trial's actor. A worker forked from the node's
own template still imports Tune (its class's module) before its trial runs:
tens of milliseconds per actor. A template that imported Tune's trial actor
(or torch, for the Train runs of Ray's Train + Tune guide) forks actors that
start at once. `init()` asks for it when the script imported Tune first;
without it, the node's own template forks them."""

from __future__ import annotations

import os
import sys

# The module a trial actor's class lives in: importing it imports Tune and Train.
TRIAL_ACTOR_MODULE = "oxray.tune._internal.trial_actor"


def _torch_preload() -> tuple:
    if "torch" not in sys.modules and "oxray.train.torch" not in sys.modules:
        return ()
    from oxray.train.torch.config import TorchConfig

    return TorchConfig()._worker_preload


def warm_trial_template() -> None:
    """Starts this node's template for trial actors, unless torch's (which Train + Tune scripts
    start at `init()`) will fork them. `init()` calls it when the script imported Tune first."""
    from oxray.train._internal.worker_group import template_warmed, warm_worker_template

    torch = _torch_preload()
    if torch and template_warmed(torch):
        return
    warm_worker_template((TRIAL_ACTOR_MODULE,))


def warm_trial_template_if_imported() -> None:
    """At `init()`: a script that imported Tune will likely run trials (`OXRAY_TUNE_TEMPLATE_AT_INIT=0`
    turns this off)."""
    if "oxray.tune" in sys.modules and os.environ.get("OXRAY_TUNE_TEMPLATE_AT_INIT", "1") != "0":
        warm_trial_template()


def trial_actor_env() -> dict:
    """The env_vars that pick a warm template for an experiment's trial actors: torch's when the
    script imported torch and its template was asked for, else Tune's own when it was, else none
    (the node's own template forks them)."""
    from oxray.train._internal.worker_group import preload_env, template_warmed

    torch = _torch_preload()
    if torch and template_warmed(torch):
        return preload_env(torch)
    if template_warmed((TRIAL_ACTOR_MODULE,)):
        return preload_env((TRIAL_ACTOR_MODULE,))
    return {}
