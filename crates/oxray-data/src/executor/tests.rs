//! The scheduler's unit tests: budgets, order, pools, limits, unions and exchanges.

use super::*;

fn config(budget_bytes: u64, preserve_order: bool) -> Config {
    Config {
        budget_bytes,
        max_tasks: 4,
        cluster_cpus: 2,
        preserve_order,
        pool_downscale_util: 0.5,
        pool_downscale_debounce_ms: 10_000,
    }
}

fn map_reads(n: usize, est: u64) -> OpSpec {
    OpSpec::Map { reads: Some(vec![est; n]), batch_rows: None, concurrency: None, pool: None }
}

fn map_inputs(batch_rows: Option<u64>) -> OpSpec {
    OpSpec::Map { reads: None, batch_rows, concurrency: None, pool: None }
}

fn out(rows: u64, bytes: u64) -> TaskOutput {
    TaskOutput { rows, bytes, blocks: 1, ..TaskOutput::default() }
}

fn submits(actions: &[Action]) -> Vec<(TaskId, Option<usize>, Vec<BundleId>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Submit { task, read, inputs, .. } => Some((*task, *read, inputs.clone())),
            _ => None,
        })
        .collect()
}

/// The pool actor each submitted call went to, in order.
fn submitted_actors(actions: &[Action]) -> Vec<Option<usize>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Submit { actor, .. } => Some(*actor),
            _ => None,
        })
        .collect()
}

/// Runs `exec` to the end as a driver would: every task makes `rows`
/// rows of `bytes` (finishing the newest first, to test ordering), and
/// every local read yields `local` blocks. Returns the rows of each output.
fn drain(exec: &mut Executor, rows: u64, bytes: u64, local: usize, submitted: &[Action]) -> Vec<u64> {
    let mut pending: Vec<TaskId> = submits(submitted).into_iter().map(|s| s.0).collect();
    let mut pulled = HashMap::new();
    let mut outputs = Vec::new();
    loop {
        for action in exec.poll() {
            match action {
                Action::Submit { task, .. } => pending.push(task),
                Action::Shuffle { outputs, .. } => pending.extend(outputs.iter().map(|o| o.0)),
                Action::Slices { outputs, .. } => pending.extend(outputs.iter().map(|o| o.0)),
                Action::PullLocal { op } => {
                    let n = pulled.entry(op).or_insert(0);
                    if *n < local {
                        *n += 1;
                        exec.local_block(op, rows, bytes, 0.0);
                    } else {
                        exec.local_done(op);
                    }
                }
                Action::Cancel { task } => pending.retain(|t| *t != task),
                _ => {}
            }
        }
        if let Some((bundle, rows, _)) = exec.next_output() {
            outputs.push(rows);
            exec.release(bundle);
            continue;
        }
        if exec.finished() {
            return outputs;
        }
        let task = pending.pop().expect("the executor waits on a task");
        exec.task_done(task, out(rows, bytes));
    }
}

#[test]
fn reads_stay_within_the_budget_but_one_always_runs() {
    let mut exec = Executor::new(vec![(map_reads(10, 100), "Read".into(), vec![])], config(250, false)).unwrap();
    let first = submits(&exec.poll());
    assert_eq!(first.len(), 2, "two 100-byte reads fit 250 bytes");
    let mut tiny = Executor::new(vec![(map_reads(3, 100), "Read".into(), vec![])], config(10, false)).unwrap();
    let first = tiny.poll();
    assert_eq!(submits(&first).len(), 1, "one task runs even when it is over the budget");
    assert_eq!(drain(&mut tiny, 5, 100, 0, &first), vec![5, 5, 5]);
    assert!(tiny.peak_bytes() <= 200);
}

#[test]
fn preserve_order_emits_in_submission_order() {
    let mut exec = Executor::new(vec![(map_reads(3, 1), "Read".into(), vec![])], config(1 << 20, true)).unwrap();
    let tasks = submits(&exec.poll());
    assert_eq!(tasks.len(), 3);
    exec.task_done(tasks[2].0, out(3, 1));
    exec.task_done(tasks[1].0, out(2, 1));
    assert_eq!(exec.next_output(), None, "the first task has not finished");
    exec.task_done(tasks[0].0, out(1, 1));
    let rows: Vec<u64> = std::iter::from_fn(|| exec.next_output()).map(|o| o.1).collect();
    assert_eq!(rows, vec![1, 2, 3]);
}

#[test]
fn a_local_read_is_pulled_only_on_demand() {
    let specs = vec![(OpSpec::LocalRead, "Read".into(), vec![]), (map_inputs(None), "Map".into(), vec![0])];
    let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
    let actions = exec.poll();
    assert_eq!(actions, vec![Action::PullLocal { op: 0 }]);
    assert_eq!(exec.poll(), vec![], "one pull at a time");
    exec.local_block(0, 7, 10, 0.0);
    assert_eq!(drain(&mut exec, 7, 10, 4, &[]).iter().sum::<u64>(), 35);
    assert_eq!(exec.used_bytes(), 0, "every block was released");
}

#[test]
fn a_batch_size_bundles_inputs() {
    let specs = vec![(map_reads(5, 1), "Read".into(), vec![]), (map_inputs(Some(25)), "Map".into(), vec![0])];
    let mut exec = Executor::new(specs, config(1 << 20, true)).unwrap();
    // Each read makes 10 rows; each map task sees 30 (25 or more), the last one the rest.
    let mut rows = Vec::new();
    let mut map_inputs_seen = Vec::new();
    let mut pending = Vec::new();
    loop {
        for action in exec.poll() {
            if let Action::Submit { task, op, inputs, .. } = action {
                pending.push((task, op));
                if op == 1 {
                    map_inputs_seen.push(inputs.len());
                }
            }
        }
        if let Some((bundle, r, _)) = exec.next_output() {
            rows.push(r);
            exec.release(bundle);
            continue;
        }
        if exec.finished() {
            break;
        }
        let (task, op) = pending.remove(0);
        let r = if op == 0 { 10 } else { 10 * map_inputs_seen[rows.len()] as u64 };
        exec.task_done(task, out(r, 1));
    }
    assert_eq!(map_inputs_seen, vec![3, 2]);
    assert_eq!(rows, vec![30, 20]);
}

#[test]
fn a_limit_cuts_and_cancels_upstream() {
    let specs = vec![(map_reads(100, 1), "Read".into(), vec![]), (OpSpec::Limit { n: 15 }, "Limit".into(), vec![0])];
    let mut exec = Executor::new(specs, config(1 << 20, true)).unwrap();
    let tasks = submits(&exec.poll());
    assert_eq!(tasks.len(), 4, "max_tasks in flight");
    exec.task_done(tasks[0].0, out(10, 10));
    exec.task_done(tasks[1].0, out(10, 10));
    let actions = exec.poll();
    assert!(actions.iter().any(|a| matches!(a, Action::Slice { rows: 5, .. })), "{actions:?}");
    let cancels = actions.iter().filter(|a| matches!(a, Action::Cancel { .. })).count();
    assert_eq!(cancels, 2, "the two reads still running are cancelled");
    let rows: Vec<u64> = std::iter::from_fn(|| exec.next_output()).map(|o| o.1).collect();
    assert_eq!(rows, vec![10, 5]);
    assert!(exec.finished());
    assert_eq!(exec.tasks_in_flight(), 0);
}

#[test]
fn a_union_runs_its_inputs_in_turn() {
    let specs = vec![
        (map_reads(2, 1), "A".into(), vec![]),
        (map_reads(3, 1), "B".into(), vec![]),
        (OpSpec::Union, "Union".into(), vec![0, 1]),
    ];
    let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
    let first = exec.poll();
    assert!(first.iter().all(|a| matches!(a, Action::Submit { op: 0, .. })), "B waits for A: {first:?}");
    assert_eq!(drain(&mut exec, 4, 1, 0, &first).len(), 5);
}

#[test]
fn an_actor_pool_starts_small_and_grows_to_its_max() {
    let pool = PoolSpec { min_size: 1, initial_size: 1, max_size: Some(2), per_actor: 1 };
    let spec = OpSpec::Map { reads: Some(vec![1; 6]), batch_rows: None, concurrency: None, pool: Some(pool) };
    let mut exec = Executor::new(vec![(spec, "Pool".into(), vec![])], config(1 << 20, false)).unwrap();
    let actions = exec.poll();
    let starts = actions.iter().filter(|a| matches!(a, Action::StartActor { .. })).count();
    assert_eq!(starts, 2, "one at first, one more while the first is busy: {actions:?}");
    assert_eq!(submitted_actors(&actions), vec![Some(0), Some(1)], "one call per actor");
    assert_eq!(drain(&mut exec, 1, 1, 0, &actions).len(), 6);
}

#[test]
fn an_idle_pool_shrinks_to_its_minimum_after_the_debounce() {
    let pool = PoolSpec { min_size: 1, initial_size: 1, max_size: Some(3), per_actor: 1 };
    let spec = OpSpec::Map { reads: None, batch_rows: None, concurrency: None, pool: Some(pool) };
    let mut exec = Executor::new(
        vec![(OpSpec::LocalRead, "Read".into(), vec![]), (spec, "Pool".into(), vec![0])],
        config(1 << 20, false),
    )
    .unwrap();
    // Three blocks arrive while every call is still running: the pool grows to three.
    let mut submitted = Vec::new();
    let mut actions = exec.poll_at(0);
    for _ in 0..3 {
        assert!(actions.contains(&Action::PullLocal { op: 0 }), "{actions:?}");
        exec.local_block(0, 1, 1, 0.0);
        actions = exec.poll_at(0);
        submitted.extend(submits(&actions).into_iter().map(|s| s.0));
    }
    let starts = |a: &[Action]| a.iter().filter(|a| matches!(a, Action::StartActor { .. })).count();
    assert_eq!(submitted.len(), 3);
    for task in submitted {
        exec.task_done(task, out(1, 1));
    }
    while let Some((bundle, ..)) = exec.next_output() {
        exec.release(bundle);
    }
    // Idle, but within the debounce after growing: nothing stops.
    let stops = |a: &[Action]| {
        a.iter()
            .filter_map(|a| match a {
                Action::StopActor { actor, .. } => Some(*actor),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(stops(&exec.poll_at(9_999)).is_empty());
    // Past it: idle actors stop one by one down to the minimum.
    let actions = exec.poll_at(10_000);
    assert_eq!(stops(&actions), vec![2, 1], "{actions:?}");
    assert!(stops(&exec.poll_at(20_000)).is_empty(), "the minimum stays");
    // More input: the remaining actor takes it; one more grows the pool into a new slot.
    exec.local_block(0, 1, 1, 0.0);
    let actions = exec.poll_at(20_000);
    assert_eq!(starts(&actions), 0);
    exec.local_block(0, 1, 1, 0.0);
    let actions = exec.poll_at(20_000);
    assert!(actions.contains(&Action::StartActor { op: 1, actor: 3 }), "{actions:?}");
    assert_eq!(submitted_actors(&actions), vec![Some(3)], "a stopped actor's slot gets no call");
}

#[test]
fn an_actor_pool_after_an_exchange_waits_for_its_tasks() {
    let shuffle = AllToAll::RandomShuffle { seed: Some(1), num_blocks: Some(2) };
    let pool = PoolSpec { min_size: 1, initial_size: 2, max_size: Some(2), per_actor: 1 };
    let specs = vec![
        (map_reads(3, 1), "Read".into(), vec![]),
        (OpSpec::AllToAll(shuffle), "Shuffle".into(), vec![0]),
        (OpSpec::Map { reads: None, batch_rows: None, concurrency: None, pool: Some(pool) }, "Pool".into(), vec![1]),
    ];
    let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
    let mut pending: Vec<TaskId> = submits(&exec.poll()).into_iter().map(|s| s.0).collect();
    let mut reduce_tasks = Vec::new();
    while let Some(task) = pending.pop() {
        exec.task_done(task, out(10, 1));
        for action in exec.poll() {
            assert!(!matches!(action, Action::StartActor { .. }), "an actor started while the exchange ran");
            if let Action::Shuffle { outputs, .. } = action {
                reduce_tasks.extend(outputs.iter().map(|o| o.0));
            }
        }
    }
    assert_eq!(reduce_tasks.len(), 2);
    exec.task_done(reduce_tasks[0], out(15, 1));
    assert!(!exec.poll().iter().any(|a| matches!(a, Action::StartActor { .. })), "one reduce still runs");
    exec.task_done(reduce_tasks[1], out(15, 1));
    let actions = exec.poll();
    let starts = actions.iter().filter(|a| matches!(a, Action::StartActor { .. })).count();
    assert_eq!(starts, 2, "the pool starts once the exchange is over: {actions:?}");
}

#[test]
fn an_exchange_of_data_large_beside_the_budget_makes_smaller_partitions() {
    let shuffle = |exec: &mut Executor| -> usize {
        let mut pending = Vec::new();
        loop {
            for action in exec.poll() {
                match action {
                    Action::Submit { task, .. } => pending.push(task),
                    Action::Shuffle { outputs, .. } => return outputs.len(),
                    _ => {}
                }
            }
            exec.task_done(pending.pop().expect("a read runs"), out(10, 8 << 20));
        }
    };
    let specs = || {
        let spec = AllToAll::RandomShuffle { seed: Some(7), num_blocks: None };
        vec![(map_reads(4, 1), "Read".into(), vec![]), (OpSpec::AllToAll(spec), "Sort".into(), vec![0])]
    };
    // 32 MiB in 4 blocks through an 8 MiB budget on 2 CPUs: partitions of 2 MiB.
    let mut exec = Executor::new(specs(), config(8 << 20, false)).unwrap();
    assert_eq!(shuffle(&mut exec), 16);
    // A budget that holds it: one partition per input block, as in Ray.
    let mut exec = Executor::new(specs(), config(1 << 30, false)).unwrap();
    assert_eq!(shuffle(&mut exec), 4);
}

#[test]
fn shuffle_and_repartition_plan_their_tasks() {
    let shuffle = AllToAll::RandomShuffle { seed: Some(7), num_blocks: None };
    let specs = vec![(map_reads(3, 1), "Read".into(), vec![]), (OpSpec::AllToAll(shuffle), "Shuffle".into(), vec![0])];
    let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
    assert_eq!(drain(&mut exec, 10, 1, 0, &[]), vec![10, 10, 10]);
    let repartition = AllToAll::Repartition { num_blocks: Some(2), target_rows_per_block: None };
    let specs = vec![(map_reads(3, 1), "Read".into(), vec![]), (OpSpec::AllToAll(repartition), "Re".into(), vec![0])];
    let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
    let mut slices = None;
    let mut pending = Vec::new();
    while slices.is_none() {
        for action in exec.poll() {
            match action {
                Action::Submit { task, .. } => pending.push(task),
                Action::Slices { outputs, .. } => slices = Some(outputs),
                _ => {}
            }
        }
        if let Some(task) = pending.pop() {
            exec.task_done(task, out(10, 1));
        }
    }
    let pieces: Vec<Vec<SlicePiece>> = slices.unwrap().into_iter().map(|o| o.1).collect();
    assert_eq!(pieces, vec![vec![(0, 0, 10), (1, 0, 5)], vec![(1, 5, 5), (2, 0, 10)]]);
}

#[test]
fn randomize_block_order_is_seeded() {
    let order = |seed| {
        let spec = AllToAll::RandomizeBlockOrder { seed: Some(seed) };
        let specs = vec![(OpSpec::LocalRead, "Read".into(), vec![]), (OpSpec::AllToAll(spec), "R".into(), vec![0])];
        let mut exec = Executor::new(specs, config(1 << 20, false)).unwrap();
        let mut ids = Vec::new();
        loop {
            let actions = exec.poll();
            if actions.is_empty() {
                break;
            }
            for action in actions {
                if let Action::PullLocal { op } = action {
                    if ids.len() < 8 {
                        ids.push(exec.local_block(op, 1, 1, 0.0));
                    } else {
                        exec.local_done(op);
                    }
                }
            }
        }
        let out: Vec<u64> = std::iter::from_fn(|| exec.next_output()).map(|o| o.0).collect();
        out.iter().map(|b| ids.iter().position(|i| i == b).unwrap() as u64).collect::<Vec<_>>()
    };
    assert_eq!(order(1), order(1));
    assert_ne!(order(1), (0..8).collect::<Vec<u64>>());
}

#[test]
fn bad_topologies_are_refused() {
    assert!(Executor::new(vec![], config(1, false)).is_err());
    let dangling = vec![(map_reads(1, 1), "A".into(), vec![]), (map_reads(1, 1), "B".into(), vec![])];
    assert!(Executor::new(dangling, config(1, false)).is_err());
    let forward = vec![(map_inputs(None), "A".into(), vec![1]), (map_reads(1, 1), "B".into(), vec![])];
    assert!(Executor::new(forward, config(1, false)).is_err());
}

#[test]
fn slice_pieces_cover_each_range() {
    assert_eq!(slice_pieces(&[4, 4], &[(2, 6), (6, 6)]), vec![vec![(0, 2, 2), (1, 0, 2)], vec![(0, 0, 0)]]);
}
