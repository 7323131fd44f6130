//! The logical plan of a dataset and its optimization into stages.
//!
//! A plan is a source followed by operators. UDFs stay in Python: the plan only
//! knows what the optimizer needs about them (their kind, columns, compute and
//! batch size) and names them by [`OpId`]. Before a plan runs, the optimizer
//! pushes column selection and `limit` into a parquet reader and fuses
//! consecutive row/batch UDFs (and the read before them) into one stage, so each
//! block costs one task, not one per operator.

use std::collections::BTreeMap;

/// Names an operator of a plan (given by the caller, unique across nested plans).
pub type OpId = u64;
/// Names a source of a plan (given by the caller).
pub type SourceId = u64;

/// One `ray_remote_args` value: a number, or an opaque value the caller
/// interned (only compared for equality).
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    Number(f64),
    Token(u64),
}

/// How a map operator runs: as tasks, or on a pool of actors (class UDFs).
#[derive(Clone, Debug, PartialEq)]
pub struct Compute {
    pub actors: bool,
    /// Actors the pool keeps while idle.
    pub min_size: u32,
    /// Actors the pool starts with.
    pub initial_size: u32,
    /// `None`: up to the cluster's CPUs.
    pub max_size: Option<u32>,
    pub max_tasks_in_flight_per_actor: u32,
    pub task_concurrency: Option<u32>,
    /// `num_cpus`, `num_gpus`, `memory`, `resources.<name>`, ...
    pub remote_args: BTreeMap<String, ArgValue>,
}

impl Default for Compute {
    fn default() -> Self {
        Self {
            actors: false,
            min_size: 1,
            initial_size: 1,
            max_size: None,
            max_tasks_in_flight_per_actor: 2,
            task_concurrency: None,
            remote_args: BTreeMap::new(),
        }
    }
}

impl Compute {
    /// This stage's compute with a fused read's limits kept: the lower task
    /// concurrency and the larger of each numeric request.
    fn with_read(mut self, read: Option<&Compute>) -> Self {
        let Some(read) = read else { return self };
        self.task_concurrency = match (self.task_concurrency, read.task_concurrency) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (key, value) in &read.remote_args {
            let merged = match (self.remote_args.get(key), value) {
                (Some(ArgValue::Number(a)), ArgValue::Number(b)) => ArgValue::Number(a.max(*b)),
                (Some(mine), _) => mine.clone(),
                (None, theirs) => theirs.clone(),
            };
            self.remote_args.insert(key.clone(), merged);
        }
        self
    }
}

/// What the optimizer knows of a UDF.
#[derive(Clone, Debug, PartialEq)]
pub enum Udf {
    SelectColumns(Vec<String>),
    DropColumns,
    RenameColumns,
    /// A user function; `class` when it is a callable class (it needs an actor).
    Other {
        class: bool,
    },
}

#[derive(Clone, Debug)]
pub struct Source {
    pub id: SourceId,
    pub name: String,
    /// The file schema's column names, for a parquet source (projection and
    /// `limit` are pushed only into parquet).
    pub parquet_columns: Option<Vec<String>>,
    /// The row count from metadata, when the caller knows it.
    pub rows: Option<u64>,
    /// How its read tasks run when they run as tasks.
    pub read_compute: Option<Compute>,
}

#[derive(Clone, Debug)]
pub enum LogicalOp {
    Map {
        id: OpId,
        name: String,
        udf: Udf,
        compute: Compute,
        batch_size: Option<u64>,
        /// Whole rows of `batch_size` must reach one call (never fused into a read).
        bundle_inputs: bool,
    },
    Limit {
        id: OpId,
        n: u64,
    },
    /// random_shuffle, randomize_block_order, repartition: needs every input block.
    AllToAll {
        id: OpId,
        name: String,
    },
    Union {
        id: OpId,
        others: Vec<LogicalPlan>,
    },
}

#[derive(Clone, Debug)]
pub struct LogicalPlan {
    pub source: Source,
    pub ops: Vec<LogicalOp>,
}

/// A source with what was pushed into it.
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub source: SourceId,
    pub columns: Option<Vec<String>>,
    pub limit: Option<u64>,
    pub compute: Option<Compute>,
}

/// What the executor runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    Read {
        read: Read,
        name: String,
    },
    Map {
        ops: Vec<OpId>,
        compute: Compute,
        batch_size: Option<u64>,
        /// A read fused into this stage's tasks.
        read: Option<Read>,
        name: String,
    },
    Limit {
        n: u64,
    },
    AllToAll {
        op: OpId,
        name: String,
    },
    Union {
        inputs: Vec<Vec<Stage>>,
    },
}

impl Stage {
    pub fn name(&self) -> String {
        match self {
            Stage::Read { name, .. } | Stage::Map { name, .. } | Stage::AllToAll { name, .. } => name.clone(),
            Stage::Limit { .. } => "Limit".to_string(),
            Stage::Union { inputs } => {
                let parts: Vec<String> = inputs.iter().map(|s| describe(s)).collect();
                format!("Union({})", parts.join(" | "))
            }
        }
    }
}

/// Whether the map op `next` (of `next_compute`) may join `stage`'s tasks.
fn fusable(stage_compute: &Compute, stage_has_class: bool, next_compute: &Compute, next_is_class: bool) -> bool {
    if stage_compute.remote_args != next_compute.remote_args {
        return false;
    }
    match (stage_compute.actors, next_compute.actors) {
        (true, true) => false, // two class UDFs keep their own pools
        (true, false) => !next_is_class,
        (false, true) => !stage_has_class,
        (false, false) => true,
    }
}

/// The stages to run, after pushdown and fusion.
pub fn optimize(plan: &LogicalPlan) -> Vec<Stage> {
    let source = &plan.source;
    let mut read = Read { source: source.id, columns: None, limit: None, compute: source.read_compute.clone() };
    let mut ops = plan.ops.as_slice();
    // Projection and limit pushdown into the parquet reader.
    if let Some(file_columns) = &source.parquet_columns {
        while let Some(op) = ops.first() {
            match op {
                // The operator stays too: the reader's limit is per fragment; it keeps the exact cut.
                LogicalOp::Limit { n, .. } => {
                    read.limit = Some(*n);
                    break;
                }
                LogicalOp::Map { udf: Udf::SelectColumns(cols), compute, .. }
                    if !compute.actors && cols.iter().all(|c| file_columns.contains(c)) =>
                {
                    read.columns = Some(cols.clone());
                    ops = &ops[1..];
                }
                _ => break,
            }
        }
    }
    let mut stages = vec![Stage::Read { read, name: source.name.clone() }];
    // Whether the last map stage holds a class UDF (fusion needs it).
    let mut last_has_class = false;
    for op in ops {
        match op {
            LogicalOp::Map { id, name, udf, compute, batch_size, bundle_inputs } => {
                let is_class = matches!(udf, Udf::Other { class: true });
                // A batch size that may span blocks needs its own stage (its input is bundled).
                if let Some(Stage::Map { ops, compute: stage_compute, name: stage_name, .. }) = stages.last_mut()
                    && batch_size.is_none()
                    && fusable(stage_compute, last_has_class, compute, is_class)
                {
                    ops.push(*id);
                    stage_name.push_str("->");
                    stage_name.push_str(name);
                    if compute.actors {
                        *stage_compute = compute.clone();
                    }
                    last_has_class |= is_class;
                    continue;
                }
                let mut stage = Stage::Map {
                    ops: vec![*id],
                    compute: compute.clone(),
                    batch_size: *batch_size,
                    read: None,
                    name: name.clone(),
                };
                last_has_class = is_class;
                match stages.last() {
                    Some(Stage::Read { read, name: read_name }) if !bundle_inputs => {
                        if let Stage::Map { compute, read: fused, name: stage_name, .. } = &mut stage {
                            *compute = compute.clone().with_read(read.compute.as_ref());
                            *stage_name = format!("{read_name}->{stage_name}");
                            *fused = Some(read.clone());
                        }
                        *stages.last_mut().expect("a read stage is there") = stage;
                    }
                    _ => stages.push(stage),
                }
            }
            LogicalOp::Limit { n, .. } => match stages.last_mut() {
                Some(Stage::Limit { n: last }) => *last = (*last).min(*n),
                _ => stages.push(Stage::Limit { n: *n }),
            },
            LogicalOp::AllToAll { id, name } => stages.push(Stage::AllToAll { op: *id, name: name.clone() }),
            LogicalOp::Union { others, .. } => {
                let mut inputs = vec![std::mem::take(&mut stages)];
                inputs.extend(others.iter().map(optimize));
                stages = vec![Stage::Union { inputs }];
            }
        }
    }
    stages
}

/// The stages as one line: `ReadParquet->MapBatches(f) -> Limit`.
pub fn describe(stages: &[Stage]) -> String {
    stages.iter().map(Stage::name).collect::<Vec<_>>().join(" -> ")
}

/// The row count without reading data, when no operator can change it.
pub fn count_from_metadata(plan: &LogicalPlan) -> Option<u64> {
    let mut n = plan.source.rows?;
    for op in &plan.ops {
        match op {
            LogicalOp::Limit { n: limit, .. } => n = n.min(*limit),
            LogicalOp::Map { udf: Udf::SelectColumns(_) | Udf::DropColumns | Udf::RenameColumns, .. } => {}
            LogicalOp::AllToAll { .. } => {}
            LogicalOp::Union { others, .. } => {
                for other in others {
                    n += count_from_metadata(other)?;
                }
            }
            LogicalOp::Map { .. } => return None,
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(parquet: bool) -> Source {
        Source {
            id: 0,
            name: if parquet { "ReadParquet" } else { "ReadRange" }.into(),
            parquet_columns: parquet.then(|| vec!["a".into(), "b".into()]),
            rows: Some(100),
            read_compute: None,
        }
    }

    fn map(id: OpId, udf: Udf, compute: Compute, batch_size: Option<u64>) -> LogicalOp {
        LogicalOp::Map { id, name: format!("Map{id}"), udf, compute, batch_size, bundle_inputs: false }
    }

    fn udf() -> Udf {
        Udf::Other { class: false }
    }

    fn actors() -> Compute {
        Compute { actors: true, ..Compute::default() }
    }

    #[test]
    fn consecutive_maps_fuse_with_the_read() {
        let plan = LogicalPlan {
            source: source(false),
            ops: vec![map(1, udf(), Compute::default(), None), map(2, udf(), Compute::default(), None)],
        };
        let stages = optimize(&plan);
        assert_eq!(stages.len(), 1);
        let Stage::Map { ops, read, name, .. } = &stages[0] else { panic!("{stages:?}") };
        assert_eq!(ops, &[1, 2]);
        assert_eq!(read.as_ref().map(|r| r.source), Some(0));
        assert_eq!(name, "ReadRange->Map1->Map2");
    }

    #[test]
    fn a_batch_size_or_two_class_udfs_start_new_stages() {
        let class = Udf::Other { class: true };
        let plan = LogicalPlan {
            source: source(false),
            ops: vec![
                map(1, class.clone(), actors(), None),
                map(2, class, actors(), None),
                map(3, udf(), Compute::default(), Some(64)),
            ],
        };
        assert_eq!(describe(&optimize(&plan)), "ReadRange->Map1 -> Map2 -> Map3");
    }

    #[test]
    fn a_function_fuses_into_an_actor_stage_and_takes_its_pool() {
        let plan = LogicalPlan {
            source: source(false),
            ops: vec![map(1, udf(), Compute::default(), None), map(2, Udf::Other { class: true }, actors(), None)],
        };
        let stages = optimize(&plan);
        let Stage::Map { ops, compute, .. } = &stages[0] else { panic!("{stages:?}") };
        assert_eq!(ops, &[1, 2]);
        assert!(compute.actors);
    }

    #[test]
    fn different_remote_args_do_not_fuse() {
        let mut gpu = Compute::default();
        gpu.remote_args.insert("num_gpus".into(), ArgValue::Number(1.0));
        let plan = LogicalPlan {
            source: source(false),
            ops: vec![map(1, udf(), Compute::default(), None), map(2, udf(), gpu, None)],
        };
        assert_eq!(optimize(&plan).len(), 2);
    }

    #[test]
    fn projection_and_limit_reach_the_parquet_reader() {
        let plan = LogicalPlan {
            source: source(true),
            ops: vec![
                map(1, Udf::SelectColumns(vec!["b".into()]), Compute::default(), None),
                LogicalOp::Limit { id: 2, n: 5 },
                LogicalOp::Limit { id: 3, n: 3 },
            ],
        };
        let stages = optimize(&plan);
        assert_eq!(
            stages,
            vec![
                Stage::Read {
                    read: Read { source: 0, columns: Some(vec!["b".into()]), limit: Some(5), compute: None },
                    name: "ReadParquet".into()
                },
                Stage::Limit { n: 3 },
            ]
        );
    }

    #[test]
    fn unknown_columns_are_not_pushed_down() {
        let plan = LogicalPlan {
            source: source(true),
            ops: vec![map(1, Udf::SelectColumns(vec!["zzz".into()]), Compute::default(), None)],
        };
        let Stage::Map { read: Some(read), .. } = &optimize(&plan)[0] else { panic!() };
        assert_eq!(read.columns, None);
    }

    #[test]
    fn a_fused_read_keeps_its_concurrency_and_cpus() {
        let mut read_compute = Compute { task_concurrency: Some(2), ..Compute::default() };
        read_compute.remote_args.insert("num_cpus".into(), ArgValue::Number(2.0));
        let mut src = source(false);
        src.read_compute = Some(read_compute);
        let mut map_compute = Compute { task_concurrency: Some(4), ..Compute::default() };
        map_compute.remote_args.insert("num_cpus".into(), ArgValue::Number(1.0));
        let plan = LogicalPlan { source: src, ops: vec![map(1, udf(), map_compute, None)] };
        let Stage::Map { compute, .. } = &optimize(&plan)[0] else { panic!() };
        assert_eq!(compute.task_concurrency, Some(2));
        assert_eq!(compute.remote_args.get("num_cpus"), Some(&ArgValue::Number(2.0)));
    }

    #[test]
    fn union_nests_each_side() {
        let other = LogicalPlan { source: source(false), ops: vec![] };
        let plan = LogicalPlan {
            source: source(false),
            ops: vec![LogicalOp::Union { id: 1, others: vec![other] }, LogicalOp::Limit { id: 2, n: 1 }],
        };
        assert_eq!(describe(&optimize(&plan)), "Union(ReadRange | ReadRange) -> Limit");
    }

    #[test]
    fn count_comes_from_metadata_unless_a_udf_may_change_it() {
        let other = LogicalPlan { source: source(false), ops: vec![] };
        let plan = LogicalPlan {
            source: source(true),
            ops: vec![
                map(1, Udf::DropColumns, Compute::default(), None),
                LogicalOp::Union { id: 2, others: vec![other] },
                LogicalOp::Limit { id: 3, n: 150 },
            ],
        };
        assert_eq!(count_from_metadata(&plan), Some(150));
        let with_udf = LogicalPlan { source: source(true), ops: vec![map(1, udf(), Compute::default(), None)] };
        assert_eq!(count_from_metadata(&with_udf), None);
    }
}
