//! `oxray._native`'s data planner and scheduler: the logical plan optimizer
//! (`data_optimize`, `data_count_from_metadata`) and the streaming executor's
//! state machine (`DataExecutor`) from `oxray-data`. Plans and stages cross as
//! plain tuples (see `oxray/data/_internal/plan.py`); the scheduler's actions
//! cross as the `DataAction` enum and its figures as `OperatorFigures`, both
//! typed in `_native.pyi`.

use oxray_data::executor::{
    Action, AllToAll, Config, Executor, OpSpec, OpStats, PoolSpec, SlicePiece, TaskOutput, slice_pieces,
};
use oxray_data::plan::{self, ArgValue, Compute, LogicalOp, LogicalPlan, Read, Source, Stage, Udf};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

type Any<'py> = Bound<'py, PyAny>;

/// `(actors, min_size, initial_size, max_size, per_actor, task_concurrency, [(key, number, token)])`.
type ComputeTuple = (bool, u32, u32, Option<u32>, u32, Option<u32>, Vec<(String, Option<f64>, Option<u64>)>);

fn compute_from(tuple: ComputeTuple) -> PyResult<Compute> {
    let (actors, min_size, initial_size, max_size, max_tasks_in_flight_per_actor, task_concurrency, args) = tuple;
    let mut remote_args = BTreeMap::new();
    for (key, number, token) in args {
        let value = match (number, token) {
            (Some(n), None) => ArgValue::Number(n),
            (None, Some(t)) => ArgValue::Token(t),
            _ => return Err(PyValueError::new_err(format!("remote arg {key}: give a number or a token"))),
        };
        remote_args.insert(key, value);
    }
    Ok(Compute {
        actors,
        min_size,
        initial_size,
        max_size,
        max_tasks_in_flight_per_actor,
        task_concurrency,
        remote_args,
    })
}

fn compute_to(compute: &Compute) -> ComputeTuple {
    let args = compute
        .remote_args
        .iter()
        .map(|(k, v)| match v {
            ArgValue::Number(n) => (k.clone(), Some(*n), None),
            ArgValue::Token(t) => (k.clone(), None, Some(*t)),
        })
        .collect();
    (
        compute.actors,
        compute.min_size,
        compute.initial_size,
        compute.max_size,
        compute.max_tasks_in_flight_per_actor,
        compute.task_concurrency,
        args,
    )
}

/// `(source, ops)`: source `(id, name, parquet_columns, rows, read_compute)`;
/// ops `("map", id, name, udf, columns, class, compute, batch_size, bundle_inputs)`,
/// `("limit", id, n)`, `("all_to_all", id, name)` or `("union", id, [plans])`.
fn plan_from(obj: &Any<'_>) -> PyResult<LogicalPlan> {
    let (source, ops): (Any<'_>, Vec<Any<'_>>) = obj.extract()?;
    let (id, name, parquet_columns, rows, read_compute): (
        u64,
        String,
        Option<Vec<String>>,
        Option<u64>,
        Option<ComputeTuple>,
    ) = source.extract()?;
    let source = Source { id, name, parquet_columns, rows, read_compute: read_compute.map(compute_from).transpose()? };
    let mut logical = Vec::with_capacity(ops.len());
    for op in ops {
        let kind: String = op.get_item(0)?.extract()?;
        logical.push(match kind.as_str() {
            "map" => {
                let (_, id, name, udf, columns, class, compute, batch_size, bundle_inputs): (
                    String,
                    u64,
                    String,
                    String,
                    Vec<String>,
                    bool,
                    ComputeTuple,
                    Option<u64>,
                    bool,
                ) = op.extract()?;
                let udf = match udf.as_str() {
                    "select" => Udf::SelectColumns(columns),
                    "drop" => Udf::DropColumns,
                    "rename" => Udf::RenameColumns,
                    _ => Udf::Other { class },
                };
                LogicalOp::Map { id, name, udf, compute: compute_from(compute)?, batch_size, bundle_inputs }
            }
            "limit" => {
                let (_, id, n): (String, u64, u64) = op.extract()?;
                LogicalOp::Limit { id, n }
            }
            "all_to_all" => {
                let (_, id, name): (String, u64, String) = op.extract()?;
                LogicalOp::AllToAll { id, name }
            }
            "union" => {
                let (_, id, others): (String, u64, Vec<Any<'_>>) = op.extract()?;
                LogicalOp::Union { id, others: others.iter().map(plan_from).collect::<PyResult<_>>()? }
            }
            other => return Err(PyValueError::new_err(format!("unknown plan operator {other:?}"))),
        });
    }
    Ok(LogicalPlan { source, ops: logical })
}

fn read_to<'py>(py: Python<'py>, read: &Read) -> PyResult<Any<'py>> {
    (read.source, read.columns.clone(), read.limit).into_bound_py_any(py)
}

/// `("read", name, read)`, `("map", name, [op ids], compute, batch_size, read)`,
/// `("limit", n)`, `("all_to_all", op id, name)` or `("union", [stages])`;
/// a read is `(source id, columns, limit)`.
fn stages_to<'py>(py: Python<'py>, stages: &[Stage]) -> PyResult<Vec<Any<'py>>> {
    stages
        .iter()
        .map(|stage| match stage {
            Stage::Read { read, name } => ("read", name, read_to(py, read)?).into_bound_py_any(py),
            Stage::Map { ops, compute, batch_size, read, name } => {
                let read = read.as_ref().map(|r| read_to(py, r)).transpose()?;
                ("map", name, ops.clone(), compute_to(compute), *batch_size, read).into_bound_py_any(py)
            }
            Stage::Limit { n } => ("limit", *n).into_bound_py_any(py),
            Stage::AllToAll { op, name } => ("all_to_all", *op, name).into_bound_py_any(py),
            Stage::Union { inputs } => {
                let inputs = inputs.iter().map(|s| stages_to(py, s)).collect::<PyResult<Vec<_>>>()?;
                ("union", inputs).into_bound_py_any(py)
            }
        })
        .collect()
}

/// The stages a plan runs as, after projection/limit pushdown and fusion, and
/// their one-line description.
#[pyfunction]
pub(crate) fn data_optimize<'py>(py: Python<'py>, plan: &Any<'py>) -> PyResult<(Vec<Any<'py>>, String)> {
    let stages = plan::optimize(&plan_from(plan)?);
    Ok((stages_to(py, &stages)?, plan::describe(&stages)))
}

/// The row count from the sources' metadata, when no operator can change it.
#[pyfunction]
pub(crate) fn data_count_from_metadata(plan: &Any<'_>) -> PyResult<Option<u64>> {
    Ok(plan::count_from_metadata(&plan_from(plan)?))
}

/// For each `(lo, hi)` row range over blocks of `rows` rows, its `(block, offset, rows)` slices.
#[pyfunction]
pub(crate) fn data_slice_pieces(rows: Vec<u64>, bounds: Vec<(u64, u64)>) -> Vec<Vec<SlicePiece>> {
    slice_pieces(&rows, &bounds)
}

/// A map operator's `(read task sizes, batch rows, concurrency, (min, initial, max, per actor))`.
type MapParams = (Option<Vec<u64>>, Option<u64>, Option<u32>, Option<(u32, u32, Option<u32>, u32)>);

fn spec_from(kind: &str, params: &Any<'_>) -> PyResult<OpSpec> {
    Ok(match kind {
        "local" => OpSpec::LocalRead,
        "map" => {
            let (reads, batch_rows, concurrency, pool): MapParams = params.extract()?;
            let pool = pool.map(|(min_size, initial_size, max_size, per_actor)| PoolSpec {
                min_size,
                initial_size,
                max_size,
                per_actor,
            });
            OpSpec::Map { reads, batch_rows, concurrency, pool }
        }
        "limit" => OpSpec::Limit { n: params.extract()? },
        "random_shuffle" => {
            let (seed, num_blocks): (Option<u64>, Option<u64>) = params.extract()?;
            OpSpec::AllToAll(AllToAll::RandomShuffle { seed, num_blocks })
        }
        "randomize_block_order" => OpSpec::AllToAll(AllToAll::RandomizeBlockOrder { seed: params.extract()? }),
        "repartition" => {
            let (num_blocks, target_rows_per_block): (Option<u64>, Option<u64>) = params.extract()?;
            OpSpec::AllToAll(AllToAll::Repartition { num_blocks, target_rows_per_block })
        }
        "union" => OpSpec::Union,
        other => return Err(PyValueError::new_err(format!("unknown executor operator {other:?}"))),
    })
}

/// One thing the scheduler asks its driver to do (`DataExecutor.poll`), in order.
/// In Python each variant is a subclass (`DataAction.Submit`, ...) with its fields
/// as attributes, so the driver `match`es on them.
#[pyclass(module = "oxray._native", frozen)]
pub(crate) enum DataAction {
    /// Read the next block of local read `op`, then report `local_block` or `local_done`.
    PullLocal { op: usize },
    /// Start actor `actor` of `op`'s pool.
    StartActor { op: usize, actor: usize },
    /// Actor `actor` of `op`'s pool is idle and no longer needed: it may exit in its own time.
    StopActor { op: usize, actor: usize },
    /// Run `op`'s UDFs on read task `read` or on the bundles `inputs`, on `actor` of its
    /// pool when it has one; report with `task_done(task, ...)`.
    Submit { task: u64, op: usize, read: Option<usize>, inputs: Vec<u64>, actor: Option<usize> },
    /// `out` is the first `rows` rows of `bundle`; report its size with `sliced`.
    Slice { bundle: u64, rows: u64, out: u64 },
    /// Shuffle `inputs`: a map task per input seeded `map_seeds[i]`, then output task
    /// `outputs[j] = (task, seed)` joins part j of each.
    Shuffle { op: usize, inputs: Vec<u64>, map_seeds: Vec<u64>, outputs: Vec<(u64, u64)> },
    /// Each output task `(task, pieces)` joins `(index into inputs, offset, rows)` slices.
    Slices { op: usize, inputs: Vec<u64>, outputs: Vec<(u64, Vec<SlicePiece>)> },
    /// The bundle is consumed: drop it.
    Release { bundle: u64 },
    /// The task's output is no longer needed.
    Cancel { task: u64 },
    /// `op`'s actors are no longer needed: kill them when `cancelled` (calls may still
    /// run), else let them exit in their own time.
    StopActors { op: usize, cancelled: bool },
}

impl From<Action> for DataAction {
    fn from(action: Action) -> Self {
        match action {
            Action::PullLocal { op } => DataAction::PullLocal { op },
            Action::StartActor { op, actor } => DataAction::StartActor { op, actor },
            Action::StopActor { op, actor } => DataAction::StopActor { op, actor },
            Action::Submit { task, op, read, inputs, actor } => DataAction::Submit { task, op, read, inputs, actor },
            Action::Slice { bundle, rows, out } => DataAction::Slice { bundle, rows, out },
            Action::Shuffle { op, inputs, map_seeds, outputs } => {
                DataAction::Shuffle { op, inputs, map_seeds, outputs }
            }
            Action::Slices { op, inputs, outputs } => DataAction::Slices { op, inputs, outputs },
            Action::Release { bundle } => DataAction::Release { bundle },
            Action::Cancel { task } => DataAction::Cancel { task },
            Action::StopActors { op, cancelled } => DataAction::StopActors { op, cancelled },
        }
    }
}

/// What one operator has done so far (`DataExecutor.op_figures`, `progress`).
#[pyclass(module = "oxray._native", frozen, get_all)]
pub(crate) struct OperatorFigures {
    pub name: String,
    /// Rows, bytes and blocks it has output.
    pub rows: u64,
    pub bytes: u64,
    pub blocks: u64,
    /// Tasks it submitted, and how many of them run now.
    pub tasks: u64,
    pub in_flight: u64,
    /// Seconds since it started (until it finished), and its tasks' CPU seconds.
    pub wall_s: f64,
    pub cpu_s: f64,
}

impl OperatorFigures {
    fn of(stats: &OpStats) -> Self {
        OperatorFigures {
            name: stats.name.clone(),
            rows: stats.rows,
            bytes: stats.bytes,
            blocks: stats.blocks,
            tasks: stats.tasks,
            in_flight: stats.in_flight,
            wall_s: stats.wall_s(),
            cpu_s: stats.cpu_s,
        }
    }
}

/// The streaming executor's scheduler. The Python driver performs the actions
/// `poll()` returns and reports back; the lock makes it safe to release
/// outputs from another thread (a split coordinator does).
#[pyclass(module = "oxray._native", frozen)]
pub(crate) struct DataExecutor {
    inner: Mutex<Executor>,
    /// The clock `poll` gives the scheduler (its pools' scale-down is paced by it).
    started: Instant,
}

impl DataExecutor {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Executor>> {
        self.inner.lock().map_err(|_| PyRuntimeError::new_err("the data executor failed earlier (poisoned lock)"))
    }
}

#[pymethods]
impl DataExecutor {
    /// `specs`: `(kind, name, inputs, params)` bottom-up; the last is the output.
    #[new]
    fn new(
        specs: Vec<(String, String, Vec<usize>, Any<'_>)>,
        budget_bytes: u64,
        max_tasks: u32,
        cluster_cpus: u32,
        preserve_order: bool,
        pool_downscale_util: f64,
        pool_downscale_debounce_s: f64,
    ) -> PyResult<Self> {
        if !pool_downscale_util.is_finite()
            || pool_downscale_util < 0.0
            || !pool_downscale_debounce_s.is_finite()
            || pool_downscale_debounce_s < 0.0
        {
            return Err(PyValueError::new_err(format!(
                "actor_pool_util_downscaling_threshold={pool_downscale_util} and the scale-down debounce \
                 {pool_downscale_debounce_s} s must be numbers >= 0"
            )));
        }
        let specs = specs
            .into_iter()
            .map(|(kind, name, inputs, params)| Ok((spec_from(&kind, &params)?, name, inputs)))
            .collect::<PyResult<Vec<_>>>()?;
        let config = Config {
            budget_bytes,
            max_tasks: max_tasks.max(1),
            cluster_cpus: cluster_cpus.max(1),
            preserve_order,
            pool_downscale_util,
            pool_downscale_debounce_ms: (pool_downscale_debounce_s * 1000.0) as u64,
        };
        let inner = Executor::new(specs, config).map_err(PyValueError::new_err)?;
        Ok(Self { inner: Mutex::new(inner), started: Instant::now() })
    }

    /// Schedules what can move now; the actions to perform, in order.
    fn poll(&self) -> PyResult<Vec<DataAction>> {
        let now_ms = self.started.elapsed().as_millis() as u64;
        Ok(self.lock()?.poll_at(now_ms).into_iter().map(DataAction::from).collect())
    }

    /// A task finished; its output bundle's id when it made blocks.
    #[pyo3(signature = (task, rows, bytes, blocks, wall_s=0.0, cpu_s=0.0))]
    fn task_done(
        &self,
        task: u64,
        rows: u64,
        bytes: u64,
        blocks: u64,
        wall_s: f64,
        cpu_s: f64,
    ) -> PyResult<Option<u64>> {
        Ok(self.lock()?.task_done(task, TaskOutput { rows, bytes, blocks, wall_s, cpu_s }))
    }

    fn local_block(&self, op: usize, rows: u64, bytes: u64, cpu_s: f64) -> PyResult<u64> {
        Ok(self.lock()?.local_block(op, rows, bytes, cpu_s))
    }

    fn local_done(&self, op: usize) -> PyResult<()> {
        self.lock()?.local_done(op);
        Ok(())
    }

    fn sliced(&self, bundle: u64, bytes: u64) -> PyResult<()> {
        self.lock()?.sliced(bundle, bytes);
        Ok(())
    }

    /// The consumer is done with an output bundle.
    fn release(&self, bundle: u64) -> PyResult<()> {
        self.lock()?.release(bundle);
        Ok(())
    }

    /// `(bundle, rows, bytes)` of the next output, or None.
    fn next_output(&self) -> PyResult<Option<(u64, u64, u64)>> {
        Ok(self.lock()?.next_output())
    }

    fn finished(&self) -> PyResult<bool> {
        Ok(self.lock()?.finished())
    }

    /// The figures of each operator that has started (for the progress bars).
    fn progress(&self) -> PyResult<Vec<OperatorFigures>> {
        let exec = self.lock()?;
        Ok(exec.op_stats().filter(|s| s.started.is_some()).map(OperatorFigures::of).collect())
    }

    /// The figures of every operator, in the plan's order (for `stats()` and the dashboard).
    fn op_figures(&self) -> PyResult<Vec<OperatorFigures>> {
        Ok(self.lock()?.op_stats().map(OperatorFigures::of).collect())
    }

    /// `(used, peak)`: object-store bytes the execution holds now, and at most so far.
    fn memory(&self) -> PyResult<(u64, u64)> {
        let exec = self.lock()?;
        Ok((exec.used_bytes(), exec.peak_bytes()))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DataExecutor>()?;
    m.add_class::<DataAction>()?;
    m.add_class::<OperatorFigures>()?;
    m.add_function(wrap_pyfunction!(data_optimize, m)?)?;
    m.add_function(wrap_pyfunction!(data_count_from_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(data_slice_pieces, m)?)?;
    Ok(())
}
