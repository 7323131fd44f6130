"""pytest plugin of the Ray compatibility harness (``-p ray_compat_plugin``).

1. The mechanical filter: at collection, each test is classified as public-API or
   excluded. A test is excluded when its source touches Ray internals or things out
   of oxray's scope. The source looked at is the test function (its body, its
   decorators, and only the parametrize values of this test's own parameter set),
   the module-level helpers, fixtures and imports it uses (transitively), and the
   fixtures it requests; docstrings and comments are not looked at, nor the
   ``if client_test_enabled():`` branches (Ray Client mode is never on here).
   Excluded tests are deselected; each is logged with the token that excluded it.
2. ``@pytest.mark.asyncio`` tests (``async def``) run in a new event loop, as
   pytest-asyncio would run them (the venv need not have pytest-asyncio); and
   ``pytest_lazy_fixtures.lf(name)`` in parametrize values (Ray Data's tests use it) is
   resolved to that fixture's value when the venv lacks pytest-lazy-fixtures.
3. A record of each test's outcome, written as the test ends (so it survives a run
   killed by the per-file timeout), with the first line of its error.

Environment: ``RAY_COMPAT_OUT`` (the folder to write to), ``RAY_COMPAT_STEM`` (the
name of this file's records), ``RAY_COMPAT_RAY_PATH`` (the test file's path in
Ray's tree, used in the test ids written), ``RAY_COMPAT_RESUME`` (when set, tests
already recorded are deselected: the run goes on after a killed one).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import os
import re
import sys
import types

import pytest

# Test utilities of Ray's ``ray._private.test_utils`` / ``ray._common.test_utils`` (and a few
# test-local helper modules) that use only Ray's public API: the harness provides them, and
# importing them does not make a test internal.
ALLOWED_HELPERS = {
    "wait_for_condition",
    "async_wait_for_condition",
    "SignalActor",
    "Semaphore",
    "run_string_as_driver",
    "run_string_as_driver_nonblocking",
    "run_string_as_driver_stdout_stderr",
    "wait_for_pid_to_exit",
    "client_test_enabled",
    "external_redis_test_enabled",
    "wait_for_assertion",
    "wait_until_succeeded_without_exception",
    "same_elements",
    "chdir",
    "check_call_ray",
    "check_call_subprocess",
    "placement_group_assert_no_leak",
    "is_placement_group_removed",
    "kill_actor_and_wait_for_failure",
    "wait_for_num_actors",
    "simulate_s3_bucket",
    "create_remote_signal_actor",
    "create_dict_checkpoint",
    "load_dict_checkpoint",
    # Module-path aliases of public Train v2 API (the harness's overlay maps them).
    "DataParallelTrainer",
    "TrainingFailedError",
    "WorkerGroupError",
    "ControllerError",
    "Result",
    "is_v2_enabled",
}

# In Tune's test files only: a path helper (``ray.air._internal.uri_utils.URI``, which the
# tests use to join a storage path and a name) and the S3 context manager of Ray's Train
# tests (the overlay writes both on the standard library and moto), and RLlib's
# re-registration of its algorithms after ray.shutdown() (a no-op: oxray has no RLlib).
TUNE_ALLOWED_HELPERS = {"URI", "mock_s3_bucket_uri", "_register_all"}

# Fixtures of Ray's conftest that the harness does not provide, and why.
EXCLUDED_FIXTURES = {
    "ray_start_cluster": "cluster_utils (multi-node fixture)",
    "ray_start_cluster_enabled": "cluster_utils (multi-node fixture)",
    "ray_start_cluster_init": "cluster_utils (multi-node fixture)",
    "ray_start_cluster_head": "cluster_utils (multi-node fixture)",
    "ray_start_cluster_2_nodes": "cluster_utils (multi-node fixture)",
    "ray_start_cluster_head_with_env_vars": "cluster_utils (multi-node fixture)",
    "ray_start_cluster_head_with_external_redis": "external redis (GCS internals)",
    "ray_start_cluster_head_with_external_redis_sentinel": "external redis (GCS internals)",
    "ray_start_regular_with_external_redis": "external redis (GCS internals)",
    "external_redis": "external redis (GCS internals)",
    "external_redis_with_sentinel": "external redis (GCS internals)",
    "two_node_cluster": "cluster_utils (multi-node fixture)",
    "start_cluster": "cluster_utils (multi-node fixture)",
    "start_cluster_shared": "cluster_utils (multi-node fixture)",
    "local_autoscaling_cluster": "autoscaler (multi-node fixture)",
    "ray_start_chaos_cluster": "cluster_utils (multi-node fixture)",
    "ray_start_2x2_gpu_cluster": "cluster_utils (multi-node fixture)",
    "ray_start_4_cpus_2_gpus": "GPUs (num_gpus > 0)",
    "ray_start_client_server": "ray.util.client (Ray Client)",
    "init_and_serve": "ray.util.client (Ray Client)",
    "error_pubsub": "error_pubsub (GCS pubsub internals)",
    "log_pubsub": "log_pubsub (GCS pubsub internals)",
    "use_tls": "TLS fixture (Ray's TLS internals)",
    "set_runtime_env_plugins": "runtime env plugins (Ray internals)",
    "set_enable_auto_connect": "auto_init_hook (Ray internals)",
    "enable_pickle_debug": "RAY_ env knob",
    "maybe_setup_external_redis": "external redis (GCS internals)",
    "start_http_proxy": "http proxy fixture (Ray internals)",
    "call_ray_start_context_with_proxy_server": "http proxy fixture (Ray internals)",
    "ray_start_with_dashboard": "dashboard internals fixture",
    "make_sure_dashboard_http_port_unused": "dashboard agent internals",
    "mock_runtime_context": "monkeypatched RuntimeContext (Train internals)",
}

# RAY_ environment variables that are public interfaces, not knobs of Ray's internals.
PUBLIC_RAY_ENV = {"RAY_ADDRESS", "RAY_NAMESPACE", "RAY_CHDIR_TO_TRIAL_DIR"}

# (label, regex) over the source text; the first match excludes the test. String literals
# count only when they are Python code (a driver script, a dotted name, an env var name),
# not prose or regular expressions.
TOKENS = [
    ("ray._private", re.compile(r"\bray\._private\b")),
    ("_private", re.compile(r"\._private\b")),
    ("_raylet", re.compile(r"\b_raylet\b")),
    ("_system_config", re.compile(r"_system_config")),
    ("cluster_utils", re.compile(r"\bcluster_utils\b")),
    ("ray_start_cluster", re.compile(r"\bray_start_cluster\w*")),
    ("ray.util.client", re.compile(r"\bray\.util\.client\b|\bray_start_client_server\b")),
    ("ray.serve", re.compile(r"\bray\.serve\b|^from ray import serve$", re.M)),
    ("ray.tune", re.compile(r"\bray\.tune\b|^from ray import tune$", re.M)),
    ("ray.data", re.compile(r"\bray\.data\b|^from ray import data$", re.M)),
    ("ray.dag", re.compile(r"\bray\.dag\b|^from ray import dag$", re.M)),
    (".bind(", re.compile(r"\.bind\(")),
    ("use_gpu=True", re.compile(r"\buse_gpu\s*=\s*True")),
    ("_internal_kv", re.compile(r"\binternal_kv\b|\b_internal_kv\w*")),
    ("global_worker", re.compile(r"\bglobal_worker\b")),
    ("ray.experimental", re.compile(r"\bray\.experimental\b|^from ray import experimental$", re.M)),
    ("ray._common", re.compile(r"\bray\._common\b")),
    ("_internal", re.compile(r"\b_internal\b")),
    ("ray.core.generated", re.compile(r"\bray\.core\.generated\b|_pb2\b")),
    ("ray.dashboard", re.compile(r"\bray\.dashboard\b")),
    ("ray.autoscaler", re.compile(r"\bray\.autoscaler\b")),
    ("ray.scripts", re.compile(r"\bray\.scripts\b")),
    ("ray.worker", re.compile(r"\bray\.worker\b")),
    ("java workers", re.compile(r"\bjava_function\b|\bjava_actor_class\b|\bray\.cross_language\b")),
    # A private name of a Ray module (ray.x._y, or `from ray.x import _y`).
    ("private ray name", re.compile(r"\bray(\.[A-Za-z]\w*)*\._(?!_)\w+|^from ray[\w.]* import _(?!_)\w+", re.M)),
]


# Ray Data's test files (python/ray/data/tests/...): ``ray.data`` is in scope there; its
# internals are not. ``ray.data._internal`` and private names are caught by TOKENS; these
# are the internals reached through public modules or through Ray Data's test helpers
# (its conftest, util.py, test_util.py, imported with ``*`` or by name).
DATA_TOKENS = [
    (
        "ray.data block internals",
        re.compile(
            r"\b(BlockAccessor|BlockColumnAccessor|BlockExecStats|BlockMetadataWithSchema|BlockBuilder"
            r"|iter_internal_ref_bundles|get_internal_block_refs)\b"
        ),
    ),
    (
        "Ray Data execution metrics (object store / task table internals)",
        re.compile(
            r"\b(CoreExecutionMetrics|PhysicalCoreExecutionMetrics|assert_core_execution_metrics_equals"
            r"|get_initial_core_execution_metrics_snapshot|assert_blocks_expected_in_plasma|task_metrics_flushed)\b"
        ),
    ),
    (
        "Ray Data operator / plan internals (test helpers)",
        re.compile(
            r"\b(run_op_tasks_sync|run_one_op_task|create_map_transformer_from_block_fn|mock_all_to_all_op"
            r"|plan_has_operator|plan_operator_comes_before|get_operators_of_type|get_operator_types"
            r"|get_parquet_read_logical_op)\b"
        ),
    ),
    # A private attribute of a Ray Data object (ds._plan, ds._logical_plan, it._iter_batches,
    # DataContext._set_current, DataContext.get_current()._x); a test's own classes use
    # self._x, which stays public.
    ("private attribute", re.compile(r"(?:[)\]]|\b(?!(?:self|cls|os|sys)\b)[A-Za-z_]\w*)\._(?!_)\w+")),
    # A private keyword of a Ray Data function (read_parquet(..., _block_udf=f)).
    ("private keyword argument", re.compile(r"[(,]\s*_(?!_)[A-Za-z]\w*\s*=(?!=)")),
]

# Ray Data conftest fixtures that reach Ray Data's internals (not provided).
DATA_EXCLUDED_FIXTURES = {
    "op_two_block": "Ray Data physical operator internals (fixture)",
    "tensor_format": "ray.data._internal tensor extension formats (fixture)",
    "tensor_format_context": "ray.data._internal tensor extension formats (fixture)",
}


# Ray Tune's test files (python/ray/tune/...): ``ray.tune`` is in scope there; its
# internals are not. Public is what Ray's Tune API reference documents (doc/source/tune/api,
# less its "Tune Internals" page: TunerInternal, Trial, FunctionTrainable, wrap_function, the
# output engine) and what ray.tune's packages export; ``ray.tune.execution.placement_groups.
# PlacementGroupFactory`` is documented under that path. Private names and ``_internal``
# modules are caught by TOKENS; private attributes by the Data token, private keywords below.
# The public names of ray.tune.utils (its __all__ and the documented validate_warmstart).
TUNE_PUBLIC_UTILS = (
    "flatten_dict|unflattened_lookup|deep_update|merge_dicts|date_str|UtilMonitor|validate_save_restore"
    "|warn_if_slow|diagnose_serialization|wait_for_gpu|validate_warmstart"
)
TUNE_TOKENS = [
    (
        "Tune execution internals (TuneController, experiment state, resource managers)",
        re.compile(r"\bray\.tune\.execution\.(?!placement_groups\b)\w+|^from ray\.tune\.execution import", re.M),
    ),
    (
        "Tune execution internals (TuneController, experiment state, resource managers)",
        re.compile(r"\bray\.air\.execution\b|\b(TuneController|TrialRunner|RayTrialExecutor|TrialExecutor)\b"),
    ),
    (
        "Tune mock runners / execution test objects",
        re.compile(
            r"\b(mock_tune_controller|create_execution_test_objects)\b|\bray\.tune\.tests\.execution\b"
            r"|\b_?Mock\w*(Runner|Controller|Executor)\b"
        ),
    ),
    (
        "Trial objects built by the test (Tune internals)",
        re.compile(r"\bTrial\(|\(\s*Trial\s*\)|\b_TemporaryTrialState\b"),
    ),
    (
        "Tune internals (TunerInternal, FunctionTrainable, wrap_function, output engine)",
        re.compile(
            r"\bray\.tune\.impl\b|\b(TunerInternal|FunctionTrainable|wrap_function|TuneReporterBase)\b"
            r"|\bray\.tune\.experimental\b|\bray\.tune\.trainable\.(function_trainable|metadata|util)\b"
        ),
    ),
    (
        "ray.tune.utils internals (mock trainable, env callbacks, util helpers)",
        re.compile(
            r"\bray\.tune\.utils\.(?!util\b)\w+|\bray\.tune\.utils\.util\.(?!(?:" + TUNE_PUBLIC_UTILS + r")\b)\w+"
            r"|^from ray\.tune\.utils(?:\.util)? import (?!(?:" + TUNE_PUBLIC_UTILS + r")\b)\w+"
            r"|\b(register_mock_trainable|MOCK_TRAINABLE_NAME|MyTrainableClass)\b",
            re.M,
        ),
    ),
    (
        "Tune search / scheduler / callback internals",
        re.compile(
            r"\bray\.tune\.search\.(variant_generator|search_generator|search_algorithm|util)\b"
            r"|\b(SearchGenerator|SearchAlgorithm|generate_variants|CallbackList)\b"
            # A search algorithm driven by hand: its add_configurations/next_trial build Trial objects.
            r"|\.(add_configurations|next_trial)\("
            r"|\bray\.tune\.schedulers\.pb2_utils\b|\bray\.tune\.utils\.callback\b"
        ),
    ),
    (
        "Tune registry internals",
        re.compile(
            r"\bray\.tune\.registry\.(?!register_trainable\b|register_env\b)\w+"
            r"|^from ray\.tune\.registry import (?!register_trainable\b|register_env\b)\w+"
            r"|\b(get_trainable_cls|_global_registry)\b",
            re.M,
        ),
    ),
    (
        "StorageContext (Train/Tune storage internals)",
        re.compile(r"\b(mock_storage_context|StorageContext)\b"),
    ),
    ("ray.rllib", re.compile(r"\bray\.rllib\b|^from ray import rllib$", re.M)),
    ("Ray's example code (not API)", re.compile(r"\bray\.(tune|train)\.examples\b")),
    # Ray's environment knobs, named through their constants (RAY_TUNE_CALLBACKS_ENV_VAR,
    # RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE...).
    (
        "RAY_ env knob (a constant naming one)",
        re.compile(
            r"\b(?!RAY_ADDRESS\b|RAY_NAMESPACE\b|RAY_CHDIR_TO_TRIAL_DIR\b)RAY_[A-Z0-9_]+\b|\b[A-Z0-9_]+_ENV_VAR\b"
        ),
    ),
] + [t for t in DATA_TOKENS if t[0] == "private attribute"]


class _PrivateKeyword:
    """A private keyword argument of a call (``tune.run(f, _remote=True)``), found in the
    code's syntax tree: a ``dict(_metric=1.0)`` (a result a test reports) is data, not one."""

    def search(self, text: str) -> bool:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return False
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "dict"):
                for kw in node.keywords:
                    if kw.arg and kw.arg.startswith("_") and not kw.arg.startswith("__"):
                        return True
        return False


TUNE_TOKENS.append(("private keyword argument", _PrivateKeyword()))

# Tune files that Ray runs with RAY_TRAIN_V2_ENABLED=0 (python/ray/tune/BUILD.bazel): their
# trainers are Train v1's, passed to a Tuner (Tuner(trainer)), which Train v2 (Ray's default,
# and oxray's Train) does not have.
TUNE_TRAIN_V1_FILES = {
    "test_tuner.py",
    "test_tuner_restore.py",
    "test_api_checkpoint_integration.py",
    "test_api_migrations.py",
}
TUNE_TRAIN_V1_TOKEN = (
    "Train v1 trainer in Tune (RAY_TRAIN_V2_ENABLED=0 in Ray's BUILD; oxray's Train is v2)",
    re.compile(
        r"\b(BaseTrainer|DataParallelTrainer|TorchTrainer|XGBoostTrainer|LightGBMTrainer)\b"
        r"|\bray\.train\.(data_parallel_trainer|trainer|xgboost|lightgbm)\b"
    ),
)


def is_data_file() -> bool:
    """Whether this run is of a Ray Data test file (ray.data in scope)."""
    return os.environ.get("RAY_COMPAT_RAY_PATH", "").startswith("python/ray/data/")


def is_tune_file() -> bool:
    """Whether this run is of a Ray Tune test file (ray.tune in scope)."""
    return os.environ.get("RAY_COMPAT_RAY_PATH", "").startswith("python/ray/tune/")


def _ray_env_token(text: str) -> str | None:
    for name in re.findall(r"""['"](RAY_[A-Za-z0-9_]+)""", text):
        if name not in PUBLIC_RAY_ENV:
            return f"RAY_ env knob {name}"
    return None


def _tokens():
    if is_data_file():
        return [t for t in TOKENS if t[0] != "ray.data"] + DATA_TOKENS
    if is_tune_file():
        # Without the ``_pb2`` names of Ray's protobuf modules: ``pb2`` is Tune's PB2 scheduler.
        tokens = [t for t in TOKENS if t[0] not in ("ray.tune", "ray.core.generated")] + TUNE_TOKENS
        tokens.append(("ray.core.generated", re.compile(r"\bray\.core\.generated\b")))
        if os.path.basename(os.environ.get("RAY_COMPAT_RAY_PATH", "")) in TUNE_TRAIN_V1_FILES:
            tokens.append(TUNE_TRAIN_V1_TOKEN)
        return tokens
    return TOKENS


def find_token(text: str) -> str | None:
    for label, pattern in _tokens():
        if pattern.search(text):
            return label
    return None


def _positive(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value > 0


def gpu_use(nodes_and_wheres) -> tuple[bool, bool]:
    """(requests GPUs, declares GPUs to its own cluster) over the test's code.

    This machine has no GPUs. A test that gives its own cluster logical GPUs
    (``ray.init(num_gpus=N)``, ``"num_gpus": N`` in a fixture's parameters,
    ``--num-gpus``) and schedules on them needs no hardware and stays public; one
    that asks for GPUs without declaring any is excluded."""
    uses = declares = False
    for node, where in nodes_and_wheres:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                func = n.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                for kw in n.keywords:
                    if kw.arg == "num_gpus" and _positive(kw.value):
                        if name == "init":
                            declares = True
                        else:
                            uses = True
            elif isinstance(n, ast.Dict):
                for key, value in zip(n.keys, n.values, strict=False):
                    if isinstance(key, ast.Constant) and key.value in ("num_gpus", "GPU") and _positive(value):
                        uses = True
                        if where == "parameters" and key.value == "num_gpus":
                            declares = True
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and "--num-gpus" in n.value:
                declares = True
    return uses, declares


class _CodeStrings(ast.NodeTransformer):
    """Blanks string literals that are not Python code (prose, regular expressions)."""

    def visit_JoinedStr(self, node):
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value:
            try:
                ast.parse(node.value)
            except (SyntaxError, ValueError):
                return ast.Constant("")
        return node


def code_text(node) -> str:
    import copy

    return ast.unparse(_CodeStrings().visit(copy.deepcopy(node)))


class _Strip(ast.NodeTransformer):
    """Drops docstrings and the branches only taken in Ray Client mode."""

    @staticmethod
    def _client_test(node) -> bool | None:
        """True for ``client_test_enabled()``, False for ``not client_test_enabled()``."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = _Strip._client_test(node.operand)
            return None if inner is None else not inner
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "client_test_enabled":
                return True
        return None

    def visit_If(self, node):
        self.generic_visit(node)
        client = self._client_test(node.test)
        if client is None:
            return node
        kept = node.orelse if client else node.body
        return kept or ast.Pass()

    def visit_IfExp(self, node):
        self.generic_visit(node)
        client = self._client_test(node.test)
        if client is None:
            return node
        return node.orelse if client else node.body

    def _drop_docstring(self, node):
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _drop_docstring


def _stripped(node) -> ast.AST:
    import copy

    return ast.fix_missing_locations(_Strip().visit(copy.deepcopy(node)))


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _self_attributes(node) -> set[str]:
    """The attributes of ``self`` and ``cls`` that ``node`` reads."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
    }


def _is_parametrize(decorator) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target).endswith("mark.parametrize")


class ModuleIndex:
    """The top-level bindings of a test module: name -> the statements that bind it."""

    def __init__(self, path: str):
        with open(path, encoding="utf-8") as f:
            # Module-level `if client_test_enabled():` branches are dropped too.
            self.tree = _Strip().visit(ast.parse(f.read()))
        self.bindings: dict[str, list[tuple[str, ast.AST | str]]] = {}
        self._collect(self.tree.body)

    def _bind(self, name, kind, value):
        self.bindings.setdefault(name, []).append((kind, value))

    def _collect(self, body):
        for node in body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._bind(alias.asname, "import", f"import {alias.name}")
                    # `import a.b.c` binds `a`; the attribute chain is in the user's own text.
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    bound = alias.asname or alias.name
                    if alias.name in ALLOWED_HELPERS or (is_tune_file() and alias.name in TUNE_ALLOWED_HELPERS):
                        continue
                    self._bind(bound, "import", f"from {node.module} import {alias.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(node.name, "def", node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in _names(target):
                        self._bind(name, "def", node)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                inner = list(node.body) + list(getattr(node, "orelse", [])) + list(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    inner += handler.body
                self._collect(inner)

    def find_def(self, name):
        for kind, value in self.bindings.get(name, []):
            if kind == "def" and isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                return value
        return None


_INDEXES: dict[str, ModuleIndex] = {}


def _index(path: str) -> ModuleIndex:
    if path not in _INDEXES:
        _INDEXES[path] = ModuleIndex(path)
    return _INDEXES[path]


def _function_node(index: ModuleIndex, item):
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    cls = getattr(item, "cls", None)
    if cls is not None:
        class_node = index.find_def(cls.__name__)
        if class_node is not None:
            for node in class_node.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return node, class_node
        return None, class_node
    return index.find_def(name), None


def _parametrize_pieces(decorator, callspec) -> list[ast.AST]:
    """The parts of a parametrize decorator that this parameter set uses."""
    if not isinstance(decorator, ast.Call) or not decorator.args:
        return [decorator]
    argnames_node = decorator.args[0]
    values = decorator.args[1] if len(decorator.args) > 1 else None
    for kw in decorator.keywords:
        if kw.arg == "argvalues":
            values = kw.value
    if values is None:
        return [decorator]
    try:
        argnames = ast.literal_eval(argnames_node)
    except ValueError:
        return [values]
    if isinstance(argnames, str):
        argnames = [a.strip() for a in argnames.split(",") if a.strip()]
    indices = getattr(callspec, "indices", {}) if callspec is not None else {}
    position = next((indices[a] for a in argnames if a in indices), None)
    if position is not None and isinstance(values, (ast.List, ast.Tuple)) and position < len(values.elts):
        return [values.elts[position]]
    return [values]


UNITTEST_HOOKS = (
    "setUp",
    "tearDown",
    "setUpClass",
    "tearDownClass",
    "setup_method",
    "teardown_method",
    "setup_class",
    "teardown_class",
)


def _test_pieces(item, index):  # noqa: C901 - one branch per kind of code a test is made of
    """The code that makes up the test: [(where, AST or import line)], transitively."""
    func_node, class_node = _function_node(index, item)
    if func_node is None:
        return []
    callspec = getattr(item, "callspec", None)
    pieces: list[tuple[str, ast.AST | str]] = []
    decorators = list(func_node.decorator_list) + [
        d for d in (class_node.decorator_list if class_node is not None else []) if _is_parametrize(d)
    ]
    for decorator in decorators:
        if _is_parametrize(decorator):
            pieces += [("parameters", _stripped(p)) for p in _parametrize_pieces(decorator, callspec)]
        else:
            pieces.append(("decorator", _stripped(decorator)))
    body = _stripped(func_node)
    body.decorator_list = []
    pieces.append(("test", body))

    methods = {}
    if class_node is not None:
        methods = {n.name: n for n in class_node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    seen = {func_node.name}
    queue: list[tuple[str, str]] = []

    def add_names(node, where):
        names = _names(node)
        if methods and is_tune_file():
            # The class's own helpers a test calls (self.check_results(...)).
            names |= {a for a in _self_attributes(node) if a in methods}
        for name in sorted(names):
            if name not in seen:
                seen.add(name)
                queue.append((name, where))

    for where, node in pieces:
        add_names(node, where)
    if class_node is not None and is_tune_file():
        # A unittest class's set-up and tear-down run around each of its tests (Tune's
        # files are mostly such classes), and so do those of a base class of the module.
        for name in UNITTEST_HOOKS:
            if name in methods and name not in seen:
                seen.add(name)
                queue.append((name, "fixture"))
        for base in class_node.bases:
            add_names(base, "helper")
    # The fixtures the test requests (also autouse and indirect ones): those the test
    # module or its class defines count as the test's code.
    for name in item.fixturenames:
        if name not in seen:
            seen.add(name)
            queue.append((name, "fixture"))
    while queue:
        name, where = queue.pop(0)
        label = f"{'fixture' if where == 'fixture' else 'helper'} {name}"
        if name in methods:
            node = _stripped(methods[name])
            pieces.append((label, node))
            add_names(node, label)
        for kind, value in index.bindings.get(name, []):
            if kind == "import":
                pieces.append((f"import {name} ({where})", value))
            elif value is not func_node:
                node = _stripped(value)
                pieces.append((label, node))
                add_names(node, label)
    return pieces


def classify(item) -> tuple[str, str] | None:
    """(token, where) when the test is excluded, else None."""
    index = _index(str(item.path))
    excluded_fixtures = {**EXCLUDED_FIXTURES, **DATA_EXCLUDED_FIXTURES} if is_data_file() else EXCLUDED_FIXTURES
    for name in item.fixturenames:
        if name in excluded_fixtures and not index.find_def(name):
            return excluded_fixtures[name], f"fixture {name}"
        if name.startswith("ray_start_cluster") and not index.find_def(name):
            return "ray_start_cluster", f"fixture {name}"
    pieces = _test_pieces(item, index)
    for where, piece in pieces:
        if isinstance(piece, str):
            token = find_token(piece)
        else:
            token = find_token(code_text(piece)) or _ray_env_token(ast.unparse(piece))
        if token:
            return token, where
    uses, declares = gpu_use([(p, w) for w, p in pieces if not isinstance(p, str)])
    if uses and not declares:
        return "num_gpus > 0 (GPUs the test's cluster does not declare)", "test"
    return None


_MISSING: dict[str, list[str]] = {}


def missing_ray_names(item) -> list[str]:
    """The Ray names a public test uses that oxray lacks: the test module imported them at
    its top, where the shim binds a placeholder (or a stub module) for a missing name."""
    from _ray_compat_shim import StubModule, _PlaceholderMeta

    module = getattr(item, "module", None)
    if module is None:
        return []
    names = set()
    for _, piece in _test_pieces(item, _index(str(item.path))):
        if not isinstance(piece, str):
            names |= _names(piece)
    found = []
    for name in sorted(names):
        value = module.__dict__.get(name)
        if isinstance(value, StubModule):
            found.append(value.__name__)
        elif isinstance(value, _PlaceholderMeta):
            found.append(value._ray_compat_name)
    return found


def _out(name: str) -> str | None:
    folder = os.environ.get("RAY_COMPAT_OUT")
    if not folder:
        return None
    return os.path.join(folder, f"{os.environ.get('RAY_COMPAT_STEM', 'tests')}.{name}")


def _test_id(item_or_nodeid) -> str:
    nodeid = item_or_nodeid if isinstance(item_or_nodeid, str) else item_or_nodeid.nodeid
    ray_path = os.environ.get("RAY_COMPAT_RAY_PATH")
    if ray_path and "::" in nodeid:
        return ray_path + "::" + nodeid.split("::", 1)[1]
    return nodeid


def _clean(text: str) -> str:
    return " ".join(str(text).split())[:300]


def _recorded() -> set[str]:
    path = _out("outcomes.tsv")
    if not path or not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return {line.split("\t", 1)[0] for line in f if line.strip()}


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: only the selected tests are listed
def pytest_collection_modifyitems(session, config, items):
    kept, deselected, excluded, public = [], [], [], []
    done = _recorded() if os.environ.get("RAY_COMPAT_RESUME") else set()
    for item in items:
        try:
            verdict = classify(item)
        except Exception as e:  # a test the filter cannot read counts as public
            verdict = None
            print(f"ray_compat_plugin: could not classify {item.nodeid}: {e!r}")
        if verdict is not None:
            excluded.append((_test_id(item), *verdict))
            deselected.append(item)
            continue
        public.append(_test_id(item))
        try:
            missing = missing_ray_names(item)
        except Exception:
            missing = []
        if missing:
            _MISSING[item.nodeid] = missing
        if _test_id(item) in done:
            deselected.append(item)
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    if done:
        return  # the first (killed) run wrote the lists
    if _out("excluded.tsv"):
        with open(_out("excluded.tsv"), "w", encoding="utf-8") as f:
            for test_id, token, where in excluded:
                f.write(f"{test_id}\t{token}\t{where}\n")
        with open(_out("public.txt"), "w", encoding="utf-8") as f:
            for test_id in public:
                f.write(test_id + "\n")


_PHASES: dict[str, dict[str, object]] = {}


def _cause(report) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return _clean(longrepr[-1])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        lines = [line.strip() for line in crash.message.strip().splitlines() if line.strip()]
        # A task's error (RayTaskError(X): ray::f() (pid=...)) ends with the error it wraps.
        if len(lines) > 1 and "Error(" in lines[0] and lines[-1] != lines[0]:
            return _clean(f"{lines[0]} ... {lines[-1]}")
        return _clean(lines[0])
    text = str(longrepr).strip().splitlines()
    errors = [line for line in text if line.startswith("E ")]
    return _clean((errors or text or [""])[0].lstrip("E "))


def pytest_runtest_logstart(nodeid, location):
    path = _out("progress.tsv")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(_test_id(nodeid) + "\n")


def pytest_runtest_logreport(report):
    state = _PHASES.setdefault(report.nodeid, {"outcome": None, "cause": ""})
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            state["outcome"] = "xfailed" if report.skipped else "xpassed"
        elif state["outcome"] is None or report.failed:
            state["outcome"] = report.outcome
        if report.failed or report.skipped:
            state["cause"] = _cause(report)
    elif report.failed:  # setup or teardown
        if state["outcome"] not in ("failed",):
            state["outcome"] = "error"
            state["cause"] = f"[{report.when}] {_cause(report)}"
    elif report.skipped and report.when == "setup":
        state["outcome"] = "skipped"
        state["cause"] = _cause(report)
    if report.when == "teardown":
        if state["outcome"] in ("failed", "error") and report.nodeid in _MISSING:
            names = ", ".join(_MISSING[report.nodeid])
            state["cause"] = f"[uses {names}, missing in oxray] {state['cause']}"
        path = _out("outcomes.tsv")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{_test_id(report.nodeid)}\t{state['outcome'] or 'passed'}\t{state['cause']}\n")
        _PHASES.pop(report.nodeid, None)


def pytest_configure(config):
    config.addinivalue_line("markers", "asyncio: an async test, run in a new event loop by ray_compat_plugin")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs an ``async def`` test in a new event loop (unless pytest-asyncio is there)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or pyfuncitem.config.pluginmanager.hasplugin("asyncio"):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(pyfuncitem.obj(**kwargs))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    return True


class LazyFixture:
    """``lf("name")``: a parametrize value that stands for the value of fixture ``name``."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"<lazy fixture {self.name}>"


def _install_lazy_fixtures() -> None:
    """Provides ``pytest_lazy_fixtures.lf`` (resolved by the hooks below) where the venv
    lacks pytest-lazy-fixtures; an installed one is left to do its own work."""
    if "pytest_lazy_fixtures" in sys.modules or importlib.util.find_spec("pytest_lazy_fixtures") is not None:
        return
    module = types.ModuleType("pytest_lazy_fixtures")
    module.__doc__ = "The ray compat harness's stand-in for pytest-lazy-fixtures (lf only)."
    module.lf = module.lazy_fixture = LazyFixture
    module.LazyFixture = LazyFixture
    sys.modules["pytest_lazy_fixtures"] = module


_install_lazy_fixtures()


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    param = getattr(request, "param", None)
    if isinstance(param, LazyFixture):
        request.param = request.getfixturevalue(param.name)


def pytest_make_parametrize_id(config, val, argname):
    if isinstance(val, LazyFixture):
        return val.name
    return None
