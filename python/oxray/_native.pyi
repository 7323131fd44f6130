"""Type stub of `oxray._native`, the engine's Python extension module (the
`oxray-py` crate): the embedded cluster, the per-process `Client` of a node
agent, zero-copy object buffers, Train's run storage, Data's native engine
(`data_*`, `Data*`), and the typed records those return. tests/python/core/test_native_stub.py checks it against the
built module, name by name and parameter by parameter."""

import builtins
from collections.abc import Sequence
from os import PathLike
from typing import Any, ClassVar, final

import pyarrow
from typing_extensions import Buffer

_StrPath = str | PathLike[str]

__all__ = [
    "ObjectBuffer",
    "PreparedObject",
    "Client",
    "Cluster",
    "Storage",
    "TaskKind",
    "ActorInfo",
    "NodeInfo",
    "PlacementGroupInfo",
    "CreatedActor",
    "Assignment",
    "StoreStats",
    "start_cluster",
    "set_process_title",
    "record_metric",
    "print_output_raw",
    "check_label_selector",
    "label_selector_matches",
    "is_placement_group_resource",
    "encode_object",
    "DataParquetStream",
    "DataBatcher",
    "data_expand_paths",
    "data_parquet_inspect",
    "data_read_parquet",
    "data_read_csv",
    "data_read_json",
    "data_read_text",
    "data_read_bytes",
    "data_read_range",
    "data_read_csv_range",
    "data_read_json_lines_range",
    "data_write_parquet",
    "data_write_csv",
    "data_write_json",
    "data_write_bytes",
    "data_concat_batches",
    "data_encode_ipc",
    "data_optimize",
    "data_count_from_metadata",
    "data_slice_pieces",
    "DataAction",
    "DataExecutor",
    "OperatorFigures",
    "TensorBoardEventFile",
    "TuneController",
    "ServeController",
    "check_serve_config",
    "INLINE_THRESHOLD",
    "OxrayRpcError",
    "OxrayAuthError",
    "__version__",
]

__version__: str
INLINE_THRESHOLD: int
"""Objects whose serialized size is at most this many bytes travel inline."""

class OxrayRpcError(RuntimeError):
    """A call to the node agent failed: it is unreachable or its stream broke."""

class OxrayAuthError(OxrayRpcError):
    """The node agent refused the cluster token."""

@final
class TaskKind:
    """What a task is: a plain task, the creation of an actor, or a call on one."""

    NORMAL: ClassVar[TaskKind]
    ACTOR_CREATION: ClassVar[TaskKind]
    ACTOR_TASK: ClassVar[TaskKind]
    def __eq__(self, value: object, /) -> bool:
        """Equal to the same kind, and to its integer value."""
    def __hash__(self) -> int: ...
    def __int__(self) -> int: ...
    def __repr__(self) -> str: ...

@final
class ObjectBuffer:
    """An object's bytes, read-only, through the buffer protocol (inline, a
    mapped file, or a view of the node's shared-memory arena)."""

    def layout(self) -> tuple[int, tuple[int, int], list[tuple[int, int]]]:
        """(flags, (pickle start, end), [(buffer start, end), ...]) within this buffer."""
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class PreparedObject:
    """A serialized object ready to seal or return: inline bytes or reserved shared memory."""

@final
class ActorInfo:
    """An actor as the cluster knows it."""

    @property
    def actor_id(self) -> bytes: ...
    @property
    def class_name(self) -> str: ...
    @property
    def state(self) -> str:
        """Ray's name: "PENDING_CREATION", "ALIVE", "RESTARTING" or "DEAD"."""
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def num_restarts(self) -> int: ...
    @property
    def death_cause(self) -> str: ...
    @property
    def method_names(self) -> list[str]: ...
    @property
    def max_task_retries(self) -> int: ...
    def __repr__(self) -> str: ...

@final
class NodeInfo:
    """A node of the cluster."""

    @property
    def node_id(self) -> str:
        """The node id in hex."""
    @property
    def address(self) -> str:
        """The node agent's host:port."""
    @property
    def ip(self) -> str: ...
    @property
    def alive(self) -> bool: ...
    @property
    def total(self) -> dict[str, float]: ...
    @property
    def available(self) -> dict[str, float]: ...
    @property
    def is_head(self) -> bool: ...
    @property
    def session_dir(self) -> str: ...
    @property
    def start_time_ms(self) -> int: ...
    @property
    def labels(self) -> dict[str, str]:
        """Ray's node labels, `ray.io/node-id` included."""
    def __repr__(self) -> str: ...

@final
class PlacementGroupInfo:
    """A placement group and where its bundles are."""

    @property
    def placement_group_id(self) -> str:
        """The group id in hex."""
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def strategy(self) -> str:
        """ "PACK", "SPREAD", "STRICT_PACK" or "STRICT_SPREAD"."""
    @property
    def state(self) -> str:
        """ "PENDING", "CREATED" or "REMOVED"."""
    @property
    def bundles(self) -> list[dict[str, float]]: ...
    @property
    def bundle_nodes(self) -> list[str]:
        """The hex node id of each bundle, once the group is created."""
    def __repr__(self) -> str: ...

@final
class CreatedActor:
    """What `Client.submit` returns for an actor creation."""

    @property
    def actor_id(self) -> bytes: ...
    @property
    def existing(self) -> bool:
        """The actor was already there (`get_if_exists`)."""
    def __repr__(self) -> str: ...

@final
class Assignment:
    """A task given to this worker by its node agent."""

    @property
    def kind(self) -> TaskKind: ...
    @property
    def task_id(self) -> bytes: ...
    @property
    def function_id(self) -> bytes: ...
    @property
    def name(self) -> str: ...
    @property
    def args(self) -> list[ObjectBuffer]:
        """Every argument in order, values and resolved references alike."""
    @property
    def kwarg_names(self) -> list[str]:
        """The names of the last len(kwarg_names) arguments."""
    @property
    def return_ids(self) -> list[bytes]: ...
    @property
    def actor_id(self) -> bytes: ...
    @property
    def method_name(self) -> str: ...
    @property
    def env_vars(self) -> dict[str, str]: ...
    @property
    def job_id(self) -> bytes: ...
    @property
    def max_concurrency(self) -> int: ...
    @property
    def namespace(self) -> str:
        """An actor creation's namespace: where the actor is registered."""
    @property
    def job_namespace(self) -> str:
        """The submitting job's namespace: where `get_actor(name)` looks."""
    @property
    def cuda_visible_devices(self) -> str:
        """The GPUs given (an actor call: its actor's) as CUDA names them."""
    @property
    def task_env(self) -> dict[str, str]:
        """Variables set for the task's run and restored after it (an actor's creation keeps
        them): its runtime_env's `env_vars` with the engine's overrides."""
    @property
    def kept_env(self) -> dict[str, str | None]:
        """Variables the engine sets in the worker and leaves set after the task
        (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS); None removes one."""
    @property
    def resources(self) -> dict[str, float]:
        """What the task (or an actor, at its creation) holds, as it asked for it (`CPU`,
        also when drawn from a placement group's bundle)."""
    @property
    def placement_group_id(self) -> bytes | None:
        """The placement group it was placed in, if any."""
    @property
    def exit(self) -> bool:
        """The agent retired this worker (its function's `max_calls` reached): it exits."""
    @property
    def capture_child_tasks(self) -> bool:
        """Child tasks with no scheduling strategy go into this task's placement group."""
    @property
    def max_calls(self) -> int:
        """A normal task: its worker exits after running the function this many times (0: never)."""
    @property
    def retry_exception_types(self) -> bytes:
        """Pickled exception types that `retry_exceptions` retries (empty: all)."""
    @property
    def concurrency_group(self) -> str:
        """An actor call's concurrency group ("": the default one)."""
    @property
    def concurrency_groups(self) -> dict[str, int]:
        """An actor creation's concurrency groups: name -> how many of its calls run at once."""
    @property
    def functions_generation(self) -> int:
        """Bumped whenever the agent drops functions of ended jobs."""
    @property
    def cancel_task_id(self) -> bytes:
        """Not a task: this worker's actor call with that id was cancelled."""
    @property
    def cancelled_before_start(self) -> bool:
        """An actor call cancelled before it started: it must not run."""
    def __repr__(self) -> str: ...

@final
class StoreStats:
    """The embedded node's object store, in bytes and object counts."""

    @property
    def capacity(self) -> int: ...
    @property
    def shm_used(self) -> int: ...
    @property
    def spilled_bytes(self) -> int: ...
    @property
    def inline_bytes(self) -> int: ...
    @property
    def num_objects(self) -> int: ...
    @property
    def num_spilled_total(self) -> int: ...
    def __repr__(self) -> str: ...

@final
class Cluster:
    """The node (and head, unless it joined one) this process started."""

    @property
    def agent_address(self) -> str: ...
    @property
    def head_address(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def node_id(self) -> str: ...
    @property
    def session_dir(self) -> str: ...
    @property
    def shm_dir(self) -> str: ...
    @property
    def dashboard_address(self) -> str | None:
        """`host:port` of the head's HTTP server (the Jobs API), when it runs one."""
    @property
    def metrics_address(self) -> str | None:
        """`host:port` of this node's Prometheus endpoint, when it serves one."""
    def shutdown(self) -> None:
        """Kills all workers, removes the object store's files and stops the servers."""
    def serve_http(self, host: str, port: int) -> str:
        """Starts the head's HTTP server (Jobs and State APIs, dashboard) on `host:port` if
        it has none yet; returns its `host:port`."""
    def worker_pids(self) -> list[int]: ...
    def store_stats(self) -> StoreStats | None:
        """None once the cluster is shut down."""

def start_cluster(
    *,
    session_dir: _StrPath,
    python: str,
    cwd: _StrPath,
    num_cpus: float | None = None,
    num_gpus: int | None = None,
    resources: dict[str, float] = ...,
    memory: int | None = None,
    object_store_memory: int | None = None,
    worker_env: Sequence[tuple[str, str]] = ...,
    host: str = "127.0.0.1",
    token: str | None = None,
    forward_output: bool = True,
    join: str | None = None,
    port: int = 0,
    state_dir: _StrPath | None = None,
    nodes_may_join: bool = False,
    dashboard: tuple[str, int] | None = None,
    metrics: tuple[str, int] | None = None,
    labels: dict[str, str] = ...,
) -> Cluster:
    """Starts a node in this process, with its own head (listening on `port`,
    keeping its state in `state_dir`) or joining the head at `join` (its agent
    then listens on `port`). With `nodes_may_join` (and always when joining) a
    request no live node can meet waits for one instead of failing at once.
    A head with `dashboard` (host, port; 0 picks one) serves its HTTP API there;
    with `metrics` the node serves its Prometheus `/metrics` there."""

def check_label_selector(selector: dict[str, str]) -> None:
    """Raises ValueError naming a condition that is not `value`, `!value`, `in(a, b)` or `!in(a, b)`."""

def label_selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether a node with `labels` matches `selector`, as the scheduler decides."""

def is_placement_group_resource(name: str) -> bool:
    """Whether `name` is one a placement group's bundles add to their nodes (`CPU_group_<pg>`)."""

def print_output_raw() -> None:
    """At interpreter exit: worker output goes to the raw stdout/stderr descriptors from now on
    (until then it is printed through `sys.stdout` / `sys.stderr`)."""

def record_metric(
    kind: str, name: str, description: str, tags: list[tuple[str, str]], value: float, boundaries: list[float] = ...
) -> None:
    """Records `value` for metric `name` (`kind`: counter, gauge or histogram) in this process's
    registry; `ValueError` when the name has another kind or other boundaries here."""

def set_process_title(title: str) -> bool:
    """Shows `title` as this process's command line and thread name (Ray's `ray::...`);
    False when it could not."""

def encode_object(pickle: bytes, buffers: Sequence[Buffer], flags: int) -> bytes:
    """Serializes into inline bytes (used for small task arguments)."""

@final
class Client:
    """A process's client of its node agent: submits work, moves objects,
    counts references and, in a worker, receives assignments."""

    def __new__(
        cls, address: str, token: str, client_id: bytes | None = None, cluster: Cluster | None = None
    ) -> Client:
        """`cluster`: the embedded cluster of this process, whose agent is then
        called directly instead of over the network."""
    @property
    def client_id(self) -> bytes: ...
    def open_driver_session(self, job_id: bytes, entrypoint: str = ..., submission_id: str = ...) -> None:
        """A joined driver's session: its end makes the agent clean up after the job."""
    def end_driver_session(self) -> None: ...

    # objects and references
    def incref(self, id: bytes) -> None: ...
    def decref(self, id: bytes) -> None: ...
    def flush_refs(self) -> None: ...
    def prepare(self, id: bytes, pickle: bytes, buffers: Sequence[Buffer], flags: int) -> PreparedObject:
        """Serializes an object into its final place (inline or shared memory)."""
    def seal(self, prepared: PreparedObject, nested: Sequence[bytes]) -> None:
        """Makes a prepared object readable and records this process as its holder."""
    def get(
        self, ids: Sequence[bytes], timeout_s: float | None = None, fail_fast: bool = False
    ) -> list[ObjectBuffer] | None:
        """Objects by id, in order; None when the timeout passed first. With `fail_fast`, the
        first object found to hold a failed task's error ends the wait: the list holds it alone."""
    def wait(self, ids: Sequence[bytes], num_returns: int, timeout_s: float | None = None) -> list[bytes]:
        """The ids of those objects that are ready, once `num_returns` are or the timeout passed."""

    # tasks
    def submit(
        self,
        *,
        kind: TaskKind,
        task_id: bytes,
        function_id: bytes,
        name: str,
        args: Sequence[tuple[bool, bytes]],
        kwarg_names: Sequence[str],
        return_ids: Sequence[bytes],
        resources: dict[str, float],
        max_retries: int = 0,
        retry_exceptions: bool = False,
        actor_id: bytes | None = None,
        method_name: str = "",
        env_vars: dict[str, str] = ...,
        nested_refs: Sequence[bytes] = ...,
        job_id: bytes = b"",
        max_restarts: int = 0,
        max_task_retries: int = 0,
        max_concurrency: int = 1,
        actor_name: str = "",
        namespace: str = "",
        detached: bool = False,
        placement_resources: dict[str, float] = ...,
        get_if_exists: bool = False,
        job_namespace: str = "",
        parent_task_id: bytes = b"",
        capture_child_tasks: bool = False,
        max_calls: int = 0,
        call_max_task_retries: int | None = None,
        retry_exception_types: bytes = b"",
        node_affinity: tuple[bytes, bool] | None = None,
        spread: bool = False,
        label_selector: dict[str, str] = ...,
        fallback_strategy: Sequence[dict[str, str]] = ...,
        concurrency_group: str = "",
        concurrency_groups: dict[str, int] = ...,
        placement_group: tuple[bytes, int] | None = None,
    ) -> CreatedActor | None:
        """Submits a task or an actor call (returns None at once) or an actor
        creation (returns the `CreatedActor` once registered). `args` are
        (is_ref, object id or encoded value) pairs; `placement_group` is
        (group id, bundle index or -1 for any), the bundle `resources` are drawn from."""
    def register_function(self, function_id: bytes, data: bytes, job_id: bytes) -> None: ...
    def get_function(self, function_id: bytes) -> bytes: ...
    def cancel(self, object_id: bytes, force: bool = False, recursive: bool = True) -> None: ...

    # actors
    def kill_actor(self, actor_id: bytes, no_restart: bool = True) -> None: ...
    def get_named_actor(self, name: str, namespace: str) -> ActorInfo | None: ...
    def get_actor_info(self, actor_id: bytes) -> ActorInfo | None: ...
    def list_actors(self) -> list[ActorInfo]: ...

    # the cluster's nodes
    def warm_workers(self, env_vars: dict[str, str]) -> None:
        """Starts this node's worker template for workers with these extra environment variables."""
    def update_serve_routes(self, table_json: bytes) -> str:
        """Gives this node's agent Serve's route table; where its HTTP proxy listens ("" for none)."""
    def update_serve(self, details_json: str) -> None:
        """Gives the head Serve's details (Ray's `ServeInstanceDetails` JSON; "" once Serve shut down)."""
    def report_metrics(self, keepalive: bool = False) -> bool:
        """Sends this process's metrics to its agent (its `/metrics`) when they changed, or with
        `keepalive`; False when nothing was sent."""
    def save_serve_checkpoint(self, checkpoint: bytes) -> None:
        """Keeps the Serve controller's checkpoint in the head (in redb when it has a state
        directory); empty bytes drop it."""
    def serve_checkpoint(self) -> bytes:
        """The Serve controller's checkpoint the head keeps (empty: none)."""
    def cluster_info(self) -> list[NodeInfo]: ...
    def agent_table_sizes(self) -> tuple[int, int]: ...
    def follow_logs(self, token: str, job_id: bytes, skip_address: str | None = None) -> None:
        """Prints, from now on and in the background, the output of this job's
        workers on other nodes (and on this node too when `skip_address` is None)."""

    # placement groups
    def create_placement_group(
        self,
        pg_id: bytes,
        bundles: Sequence[dict[str, float]],
        strategy: str,
        name: str = "",
        namespace: str = "",
        job_id: bytes = b"",
        detached: bool = False,
        bundle_label_selector: Sequence[dict[str, str]] = ...,
        pack_label: str = "",
    ) -> PlacementGroupInfo: ...
    def remove_placement_group(self, pg_id: bytes) -> None: ...
    def get_placement_group(self, pg_id: bytes = b"", name: str = "", namespace: str = "") -> PlacementGroupInfo | None:
        """By id, or else by name in the namespace."""
    def list_placement_groups(self) -> list[PlacementGroupInfo]: ...

    # Train, Tune and Data
    def update_train_run(self, run_id: str, run_json: str, new_reports_json: list[str]) -> None:
        """Sends a Train run's whole state and its new reports (JSON) to the head."""
    def update_experiment(self, experiment_id: str, experiment_json: str, new_results_json: list[str]) -> None:
        """Sends a Tune experiment's state and its trials' new results to the head."""
    def update_dataset(self, dataset_id: str, dataset_json: str) -> None:
        """Sends a Data execution's figures (JSON) to the head."""

    # worker side
    def worker_connect(self) -> None: ...
    def next_assignment(self, timeout_s: float | None = None) -> Assignment | None:
        """The next assignment, None on timeout (None: none) or when woken; raises OxrayRpcError
        when the agent is gone."""
    def wake_worker_loop(self) -> None:
        """Ends the worker loop's wait for its next assignment (now, or the next one's at once)."""
    def task_cancelled(self, task_id: bytes) -> bool:
        """Whether the agent cancelled the task (asked after an interrupt outside user code)."""
    def task_done(
        self,
        task_id: bytes,
        returns: Sequence[PreparedObject],
        application_error: bool = False,
        nested_refs: Sequence[bytes] = ...,
        method_names: Sequence[str] = ...,
        error_text: str = "",
        retire: bool = False,
        not_retryable: bool = False,
        actor_exit: str = "",
    ) -> None:
        """Reports a finished task. `retire`: the worker reached `max_calls` and exits, so it
        takes no other task; `not_retryable`: the error is not one `retry_exceptions` lists;
        `actor_exit`: the actor ends itself, with this cause for its callers."""

@final
class Storage:
    """Train's run storage: a local directory or an s3:// prefix."""

    def __new__(cls, uri: str) -> Storage: ...
    @property
    def uri(self) -> str: ...
    def write_bytes(self, rel: str, data: bytes) -> None: ...
    def read_bytes(self, rel: str) -> bytes | None: ...
    def upload_dir(self, local: _StrPath, rel: str) -> int:
        """Copies a local directory's files under `rel/`, merging with what is there."""
    def download_dir(self, rel: str, local: _StrPath) -> int: ...
    def list(self, rel: str) -> builtins.list[str]: ...
    def delete_dir(self, rel: str) -> None: ...

# Data's native engine. Arrow inputs are anything with `__arrow_c_array__` or
# `__arrow_c_stream__` (pyarrow RecordBatch or Table); outputs are pyarrow objects.

def data_expand_paths(paths: Sequence[str], extensions: Sequence[str] | None = None) -> list[tuple[str, int]]:
    """Each input as `(uri, size)`: files, directories (walked) and globs, local or S3."""

def data_parquet_inspect(uris: Sequence[str]) -> tuple[pyarrow.Schema, list[list[tuple[int, int]]]]:
    """The dataset schema and each file's row groups as `(num_rows, uncompressed bytes)`, from footers only."""

def data_read_parquet(
    uri: str,
    row_groups: Sequence[int] | None,
    columns: Sequence[str] | None,
    limit: int | None,
    batch_size: int,
) -> list[pyarrow.RecordBatch]:
    """One fragment of a parquet file: chosen row groups and columns, at most `limit` rows."""

@final
class DataParquetStream:
    """Batches of many parquet fragments in order, decoded ahead on Rust threads
    within a budget of decoded bytes."""

    def __new__(
        cls,
        fragments: Sequence[tuple[str, Sequence[int] | None]],
        columns: Sequence[str] | None,
        limit: int | None,
        batch_size: int,
        threads: int,
        max_bytes_in_flight: int,
    ) -> DataParquetStream: ...
    def __iter__(self) -> DataParquetStream: ...
    def __next__(self) -> pyarrow.RecordBatch: ...
    @property
    def bytes_in_flight(self) -> int:
        """Decoded bytes waiting for the consumer."""

def data_read_csv(
    uri: str, delimiter: str = ",", has_header: bool = True, columns: Sequence[str] | None = None
) -> list[pyarrow.RecordBatch]:
    """A csv file's rows (schema inferred; `.gz` decompressed)."""

def data_read_json(uri: str, lines: bool | None = None) -> list[pyarrow.RecordBatch]:
    """JSON Lines or a JSON array of objects (`lines=None`: detected)."""

def data_read_text(uri: str, drop_empty_lines: bool = False) -> list[pyarrow.RecordBatch]:
    """One row per line, in a column `text`."""

def data_read_bytes(uri: str) -> bytes:
    """A whole file's bytes."""

def data_read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes `start..end` of a file (fewer at its end)."""

def data_read_csv_range(
    uri: str, start: int, end: int, delimiter: str = ",", has_header: bool = True
) -> list[pyarrow.RecordBatch]:
    """The csv rows of the lines that start in bytes `start..end` of a file (its header: the first line)."""

def data_read_json_lines_range(uri: str, start: int, end: int) -> list[pyarrow.RecordBatch]:
    """The JSON Lines rows of the lines that start in bytes `start..end` of a file."""

def data_write_parquet(
    batches: Sequence[pyarrow.RecordBatch | pyarrow.Table], dir_uri: str, filename: str, compression: str = "snappy"
) -> str:
    """Writes one parquet file `<dir_uri>/<filename>`; returns its URI."""

def data_write_csv(batches: Sequence[pyarrow.RecordBatch | pyarrow.Table], dir_uri: str, filename: str) -> str:
    """Writes one csv file (with a header row); returns its URI."""

def data_write_json(batches: Sequence[pyarrow.RecordBatch | pyarrow.Table], dir_uri: str, filename: str) -> str:
    """Writes one JSON Lines file; returns its URI."""

def data_write_bytes(dir_uri: str, filename: str, data: bytes) -> str:
    """Writes `data` as one file; returns its URI."""

@final
class DataBatcher:
    """Cuts added batches into batches of exactly `batch_size` rows, optionally
    drawn from a seeded local shuffle buffer."""

    def __new__(
        cls,
        batch_size: int | None,
        drop_last: bool = False,
        shuffle_buffer_size: int | None = None,
        seed: int | None = None,
    ) -> DataBatcher: ...
    def add(self, batch: pyarrow.RecordBatch | pyarrow.Table) -> None:
        """Adds a RecordBatch (or every batch of a table)."""
    def next_batch(self) -> pyarrow.RecordBatch | None:
        """The next full batch, or `None` until one is ready (after `finish()`: what is left)."""
    def finish(self) -> None:
        """Marks the end of the input."""

def data_concat_batches(batches: Sequence[pyarrow.RecordBatch]) -> pyarrow.RecordBatch:
    """One batch out of batches with the same columns."""

def data_encode_ipc(batch: pyarrow.RecordBatch) -> bytes:
    """An Arrow IPC stream holding one batch."""

# Data's planner and scheduler (`oxray-data`'s plan.rs and executor.rs). Plans,
# stages and actions are tuples; `oxray/data/_internal/plan.py` and
# `executor.py` build and read them.

def data_optimize(plan: tuple[Any, ...]) -> tuple[list[tuple[Any, ...]], str]:
    """The stages a plan runs as (after pushdown and fusion) and their one-line description."""

def data_count_from_metadata(plan: tuple[Any, ...]) -> int | None:
    """The row count from the sources' metadata, when no operator can change it."""

def data_slice_pieces(rows: Sequence[int], bounds: Sequence[tuple[int, int]]) -> list[list[tuple[int, int, int]]]:
    """For each (lo, hi) row range over blocks of `rows` rows, its (block, offset, rows) slices."""

@final
class DataAction:
    """One thing the scheduler asks its driver to do (`DataExecutor.poll`), in order: each
    variant is a subclass with its fields as attributes, matched with `match`."""

    @final
    class PullLocal(DataAction):
        """Read the next block of local read `op`, then report `local_block` or `local_done`."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, op: int) -> DataAction.PullLocal: ...
        @property
        def op(self) -> int: ...

    @final
    class StartActor(DataAction):
        """Start actor `actor` of `op`'s pool."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, op: int, actor: int) -> DataAction.StartActor: ...
        @property
        def op(self) -> int: ...
        @property
        def actor(self) -> int: ...

    @final
    class StopActor(DataAction):
        """Actor `actor` of `op`'s pool is idle and no longer needed: it may exit in its own time."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, op: int, actor: int) -> DataAction.StopActor: ...
        @property
        def op(self) -> int: ...
        @property
        def actor(self) -> int: ...

    @final
    class Submit(DataAction):
        """Run `op`'s UDFs on read task `read` or on the bundles `inputs` (on `actor` of its pool when it
        has one); report with `task_done(task, ...)`."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(
            cls, task: int, op: int, read: int | None, inputs: list[int], actor: int | None
        ) -> DataAction.Submit: ...
        @property
        def task(self) -> int: ...
        @property
        def op(self) -> int: ...
        @property
        def read(self) -> int | None: ...
        @property
        def inputs(self) -> list[int]: ...
        @property
        def actor(self) -> int | None: ...

    @final
    class Slice(DataAction):
        """`out` is the first `rows` rows of `bundle`; report its size with `sliced`."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, bundle: int, rows: int, out: int) -> DataAction.Slice: ...
        @property
        def bundle(self) -> int: ...
        @property
        def rows(self) -> int: ...
        @property
        def out(self) -> int: ...

    @final
    class Shuffle(DataAction):
        """A map task per input seeded `map_seeds[i]`, then output task `(task, seed)` j joins part j of each."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(
            cls, op: int, inputs: list[int], map_seeds: list[int], outputs: list[tuple[int, int]]
        ) -> DataAction.Shuffle: ...
        @property
        def op(self) -> int: ...
        @property
        def inputs(self) -> list[int]: ...
        @property
        def map_seeds(self) -> list[int]: ...
        @property
        def outputs(self) -> list[tuple[int, int]]: ...

    @final
    class Slices(DataAction):
        """Each output task `(task, pieces)` joins `(index into inputs, offset, rows)` slices."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(
            cls, op: int, inputs: list[int], outputs: list[tuple[int, list[tuple[int, int, int]]]]
        ) -> DataAction.Slices: ...
        @property
        def op(self) -> int: ...
        @property
        def inputs(self) -> list[int]: ...
        @property
        def outputs(self) -> list[tuple[int, list[tuple[int, int, int]]]]: ...

    @final
    class Release(DataAction):
        """The bundle is consumed: drop it."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, bundle: int) -> DataAction.Release: ...
        @property
        def bundle(self) -> int: ...

    @final
    class Cancel(DataAction):
        """The task's output is no longer needed."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, task: int) -> DataAction.Cancel: ...
        @property
        def task(self) -> int: ...

    @final
    class StopActors(DataAction):
        """`op`'s actors are no longer needed: kill them when `cancelled`, else let them exit."""

        __match_args__: ClassVar[tuple[str, ...]]
        def __new__(cls, op: int, cancelled: bool) -> DataAction.StopActors: ...
        @property
        def op(self) -> int: ...
        @property
        def cancelled(self) -> bool: ...

@final
class OperatorFigures:
    """What one operator has done so far (`DataExecutor.op_figures`, `progress`)."""

    @property
    def name(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def blocks(self) -> int: ...
    @property
    def tasks(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def cpu_s(self) -> float: ...

@final
class TensorBoardEventFile:
    """One trial's TensorBoard event file (`oxray-io`): TFRecord-framed Event
    protos, created 0600 (the path must not exist) with its version event."""

    def __new__(cls, path: str) -> TensorBoardEventFile: ...
    @property
    def path(self) -> str: ...
    def add_scalars(self, step: int, scalars: list[tuple[str, float]]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None:
        """Flushes; later writes raise."""

def check_serve_config(config_json: str) -> None:
    """Checks a Serve config (Ray's ServeDeploySchema, JSON) as the REST API does; ValueError names the problem."""

@final
class ServeController:
    """Serve's controller (`oxray-serve`): applications, deployments and their replicas, rolling
    updates, health checks, replacements, autoscaling decisions and Ray's statuses. No I/O: the
    controller actor reports what happened (times in epoch milliseconds) and carries out
    `take_actions()`."""

    def __new__(cls) -> ServeController: ...
    def deploy_app(
        self,
        name: str,
        route_prefix: str | None,
        ingress: str,
        deployments: list[tuple[str, dict[str, Any]]],
        now_ms: int,
    ) -> None:
        """`ValueError` naming a bad setting, a taken route prefix or a missing ingress."""
    def restore_app(
        self,
        name: str,
        route_prefix: str | None,
        ingress: str,
        deployments: list[tuple[str, dict[str, Any]]],
        adopted: list[tuple[str, str, str, str]],
        now_ms: int,
    ) -> None:
        """An application from the controller's checkpoint, with the replicas found running
        (`(deployment, replica, code_version, config_version)`) serving at once."""
    def fail_app(self, name: str, message: str, now_ms: int) -> None: ...
    def delete_app(self, name: str, now_ms: int) -> None: ...
    def replica_started(self, app: str, deployment: str, replica: str, now_ms: int) -> None: ...
    def replica_reconfigured(self, app: str, deployment: str, replica: str, now_ms: int) -> None: ...
    def replica_start_failed(self, app: str, deployment: str, replica: str, error: str, now_ms: int) -> None: ...
    def replica_died(self, app: str, deployment: str, replica: str, reason: str, now_ms: int) -> None: ...
    def replica_stopped(self, app: str, deployment: str, replica: str, now_ms: int) -> None: ...
    def health_checked(
        self, app: str, deployment: str, replica: str, healthy: bool, error: str, now_ms: int
    ) -> None: ...
    def record_requests(self, app: str, deployment: str, source: str, requests: float, now_ms: int) -> None: ...
    def tick(self, now_ms: int) -> None: ...
    def take_actions(
        self,
    ) -> list[tuple[str, str, str, str, tuple[str, str] | None, float | None]]:
        """`(kind, app, deployment, replica, versions, graceful_timeout_s)`: kind `"start"` (versions:
        code and config), `"reconfigure"` (versions: config), `"check_health"`, `"stop"` (the graceful
        timeout) or `"kill"`."""
    def status(self) -> list[dict[str, Any]]:
        """Each application: `name`, `status`, `message`, `route_prefix`, `last_deployed_time_s`,
        `deployments` (by name: `status`, `status_trigger`, `message`, `target_num_replicas`,
        `replica_states`)."""
    def routes(self) -> list[tuple[str | None, str, str, list[str]]]:
        """(route prefix or None, application, ingress deployment, serving replicas) of each application."""
        ...
    def serving(self, app: str, deployment: str) -> list[str]: ...

@final
class TuneController:
    """Tune's trial controller (`oxray-tune`): trial statuses, the resources
    running trials hold, retries and the scheduler's decisions. No I/O: the
    driver loop reports events and starts what `schedule()` returns."""

    def __new__(
        cls,
        capacity: dict[str, float],
        max_concurrent: int | None,
        max_failures: int | None,
        scheduler: tuple[Any, ...],
    ) -> TuneController: ...
    def add_trial(self, resources: dict[str, float], learns_demand: bool = False) -> int: ...
    def add_restored_trial(
        self, resources: dict[str, float], learns_demand: bool, status: str, has_checkpoint: bool, failures: int
    ) -> int: ...
    def on_train_demand(self, trial: int, demand: dict[str, float]) -> list[int]:
        """The waiting Train runs that may start their workers now (this trial's, when it fits)."""
    def schedule(self) -> list[tuple[str, int, bool]]:
        """`("start", trial, restore)`, or `("grant", trial, False)`: a waiting Train run may go."""
    def on_result(self, trial: int, time: float, reward: float | None = None) -> tuple[str, int | None]:
        """`("continue", None)`, `("stop", None)`, `("pause", None)` (it is PAUSED: stop its run),
        `("exploit", source)` or `("no_checkpoint", source)`."""
    def start_chosen(self, trial: int) -> tuple[str, int, bool] | None:
        """A driver's scheduler chose this PENDING or PAUSED trial: `("start", trial, restore)` when it
        fits now, else None."""
    def has_room_for(self, trial: int) -> bool: ...
    def pause(self, trial: int) -> None:
        """A driver's scheduler paused this RUNNING trial: PAUSED until it is chosen again."""
    def on_exploit(self, trial: int) -> None: ...
    def on_checkpoint(self, trial: int) -> None: ...
    def on_ended(self, trial: int) -> None: ...
    def take_changes(self) -> list[tuple[int, str]]:
        """Paused trials the scheduler ended since the last call, with their new status."""
    def on_failed(self, trial: int) -> str:
        """`"PENDING"` (retried) or `"ERROR"`."""
    def stop_all(self) -> list[int]: ...
    def status(self, trial: int) -> str: ...
    def failures(self, trial: int) -> int: ...
    def count(self, status: str) -> int: ...
    def all_finished(self) -> bool: ...
    def in_use(self) -> dict[str, float]: ...

@final
class DataExecutor:
    """The streaming executor's scheduler: `poll()` returns the actions to
    perform; the caller reports what happened."""

    def __new__(
        cls,
        specs: Sequence[tuple[str, str, Sequence[int], Any]],
        budget_bytes: int,
        max_tasks: int,
        cluster_cpus: int,
        preserve_order: bool,
        pool_downscale_util: float,
        pool_downscale_debounce_s: float,
    ) -> DataExecutor: ...
    def poll(self) -> list[DataAction]: ...
    def task_done(
        self, task: int, rows: int, bytes: int, blocks: int, wall_s: float = 0.0, cpu_s: float = 0.0
    ) -> int | None: ...
    def local_block(self, op: int, rows: int, bytes: int, cpu_s: float) -> int: ...
    def local_done(self, op: int) -> None: ...
    def sliced(self, bundle: int, bytes: int) -> None: ...
    def release(self, bundle: int) -> None: ...
    def next_output(self) -> tuple[int, int, int] | None: ...
    def finished(self) -> bool: ...
    def progress(self) -> list[OperatorFigures]:
        """The figures of each operator that has started."""
    def op_figures(self) -> list[OperatorFigures]:
        """The figures of every operator, in the plan's order."""
    def memory(self) -> tuple[int, int]:
        """`(used, peak)` object-store bytes the execution holds."""
