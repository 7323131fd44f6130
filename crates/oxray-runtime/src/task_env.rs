//! The environment variables the engine sets for a task, by Ray's rules. The agent
//! works them out when it hands a task to a worker (`Assignment.cuda_visible_devices`
//! and `Assignment.env`); the worker applies them as they come.
//!
//! - `CUDA_VISIBLE_DEVICES` names the GPUs the task was given (an actor call: its
//!   actor's): their indices among the node's GPUs or, when the worker started with
//!   `CUDA_VISIBLE_DEVICES` set (`2,3`, or GPU UUIDs), the entries at those indices;
//!   empty when it was given none. It is left set after the task; a runtime_env that
//!   sets it is overridden for the task's run.
//! - With `RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES` true (in the runtime_env, else
//!   in the worker's own environment) the worker's own `CUDA_VISIBLE_DEVICES` stays
//!   (none stays none) and a runtime_env's applies.
//! - `OMP_NUM_THREADS` is the task's (an actor's, at its creation) whole CPUs, at least
//!   1, left set after it, unless its runtime_env or the worker's own environment sets it.

use oxray_proto::{TaskEnv, TaskKind};
use std::collections::HashMap;

pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
pub const OMP_NUM_THREADS: &str = "OMP_NUM_THREADS";
/// Ray's opt-out: when true, workers leave `CUDA_VISIBLE_DEVICES` as it is.
pub const NOSET_CUDA_VISIBLE_DEVICES: &str = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES";

/// Ray's reading of a flag variable: true unless empty, `0`, `false` or `no`.
fn is_true(value: &str) -> bool {
    !matches!(value.trim().to_lowercase().as_str(), "" | "0" | "false" | "no")
}

/// What the rules read of the environment a worker process starts with: the agent's
/// own, the node's `worker_env` over it and, for an actor's worker, the actor's
/// runtime_env `env_vars` over that.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStartEnv {
    /// Its `CUDA_VISIBLE_DEVICES`: the node's GPUs, in the order their indices count.
    cuda_visible_devices: Option<String>,
    /// Its `RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES` is true.
    noset_cuda_visible_devices: bool,
    /// It sets `OMP_NUM_THREADS`.
    sets_omp_num_threads: bool,
}

impl WorkerStartEnv {
    /// The environment of this process, which the workers it starts inherit.
    pub fn of_this_process() -> Self {
        let read = |name: &'static str| std::env::var(name).ok().map(|value| (name, value));
        let vars: Vec<(&str, String)> =
            [CUDA_VISIBLE_DEVICES, NOSET_CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS].into_iter().filter_map(read).collect();
        Self::default().with(vars.iter().map(|(name, value)| (*name, value.as_str())))
    }

    /// This environment with `vars` set over it.
    pub fn with<'a>(&self, vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut out = self.clone();
        for (name, value) in vars {
            match name {
                CUDA_VISIBLE_DEVICES => out.cuda_visible_devices = Some(value.to_string()),
                NOSET_CUDA_VISIBLE_DEVICES => out.noset_cuda_visible_devices = is_true(value),
                OMP_NUM_THREADS => out.sets_omp_num_threads = true,
                _ => {}
            }
        }
        out
    }

    /// The GPUs at `indices` as CUDA names them: the entries of the worker's own
    /// `CUDA_VISIBLE_DEVICES` at those indices when it has one, else the indices.
    pub fn gpu_names(&self, indices: &[usize]) -> String {
        let preset: Vec<&str> = self
            .cuda_visible_devices
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .collect();
        let name = |i: usize| preset.get(i).map_or_else(|| i.to_string(), |entry| (*entry).to_string());
        indices.iter().map(|&i| name(i)).collect::<Vec<_>>().join(",")
    }

    /// The variables a task runs with: `kind` its kind, `gpu_names` its GPUs (from
    /// [`Self::gpu_names`]), `cpus` the CPUs it asked for (None: none) and `env_vars`
    /// its runtime_env's, which the worker sets for the task's run under `during_task`.
    pub fn task_env(
        &self,
        kind: TaskKind,
        gpu_names: &str,
        cpus: Option<f64>,
        env_vars: &HashMap<String, String>,
    ) -> TaskEnv {
        let mut env = TaskEnv::default();
        let noset_cuda =
            env_vars.get(NOSET_CUDA_VISIBLE_DEVICES).map_or(self.noset_cuda_visible_devices, |v| is_true(v));
        if !noset_cuda && env_vars.contains_key(CUDA_VISIBLE_DEVICES) {
            // The GPUs given win over the runtime_env's own setting.
            env.during_task.insert(CUDA_VISIBLE_DEVICES.into(), gpu_names.into());
        } else {
            let value = if noset_cuda { self.cuda_visible_devices.clone() } else { Some(gpu_names.to_string()) };
            match value {
                Some(value) => {
                    env.kept.insert(CUDA_VISIBLE_DEVICES.into(), value);
                }
                None => env.removed.push(CUDA_VISIBLE_DEVICES.into()),
            }
        }
        let sets_omp = self.sets_omp_num_threads || env_vars.contains_key(OMP_NUM_THREADS);
        if kind != TaskKind::ActorTask && !sets_omp {
            let whole_cpus = (cpus.unwrap_or(1.0).trunc() as i64).max(1);
            env.kept.insert(OMP_NUM_THREADS.into(), whole_cpus.to_string());
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn kept(env: &TaskEnv, name: &str) -> Option<String> {
        env.kept.get(name).cloned()
    }

    #[test]
    fn gpus_are_their_indices_unless_the_worker_started_with_cuda_visible_devices() {
        let plain = WorkerStartEnv::default();
        assert_eq!(plain.gpu_names(&[]), "");
        assert_eq!(plain.gpu_names(&[0, 2]), "0,2");
        let preset = plain.with([(CUDA_VISIBLE_DEVICES, "uuid1, uuid2")]);
        assert_eq!(preset.gpu_names(&[1]), "uuid2");
        assert_eq!(preset.gpu_names(&[0, 1]), "uuid1,uuid2");
        assert_eq!(preset.gpu_names(&[5]), "5", "an index past the list stays an index");
        assert_eq!(plain.with([(CUDA_VISIBLE_DEVICES, "")]).gpu_names(&[0]), "0");
    }

    #[test]
    fn cuda_visible_devices_names_the_gpus_given_and_is_empty_for_none() {
        let start = WorkerStartEnv::default();
        let none = start.task_env(TaskKind::Normal, "", None, &HashMap::new());
        assert_eq!(kept(&none, CUDA_VISIBLE_DEVICES).as_deref(), Some(""));
        let two = start.task_env(TaskKind::Normal, "2,3", None, &HashMap::new());
        assert_eq!(kept(&two, CUDA_VISIBLE_DEVICES).as_deref(), Some("2,3"));
        assert!(two.during_task.is_empty() && two.removed.is_empty());
        // A runtime_env's own value is overridden for the task's run only.
        let own = start.task_env(TaskKind::Normal, "1", None, &vars(&[(CUDA_VISIBLE_DEVICES, "7")]));
        assert_eq!(own.during_task.get(CUDA_VISIBLE_DEVICES).map(String::as_str), Some("1"));
        assert_eq!(kept(&own, CUDA_VISIBLE_DEVICES), None);
        // An actor's calls get its GPUs again.
        let call = start.task_env(TaskKind::ActorTask, "0", None, &HashMap::new());
        assert_eq!(kept(&call, CUDA_VISIBLE_DEVICES).as_deref(), Some("0"));
    }

    #[test]
    fn noset_keeps_the_workers_own_cuda_visible_devices() {
        let noset = [(NOSET_CUDA_VISIBLE_DEVICES, "1")];
        // From the runtime_env: its own value applies, over the worker's (none: removed).
        let env = WorkerStartEnv::default().task_env(
            TaskKind::Normal,
            "0",
            None,
            &vars(&[noset[0], (CUDA_VISIBLE_DEVICES, "3")]),
        );
        assert_eq!(env.removed, vec![CUDA_VISIBLE_DEVICES.to_string()]);
        assert!(env.during_task.is_empty() && kept(&env, CUDA_VISIBLE_DEVICES).is_none());
        // From the worker's environment: the worker's value is kept.
        let start = WorkerStartEnv::default().with([(CUDA_VISIBLE_DEVICES, "5,6"), noset[0]]);
        let env = start.task_env(TaskKind::Normal, "5", None, &HashMap::new());
        assert_eq!(kept(&env, CUDA_VISIBLE_DEVICES).as_deref(), Some("5,6"));
        // The runtime_env's word wins over the worker's, either way.
        let off = start.task_env(TaskKind::Normal, "5", None, &vars(&[(NOSET_CUDA_VISIBLE_DEVICES, "False")]));
        assert_eq!(kept(&off, CUDA_VISIBLE_DEVICES).as_deref(), Some("5"));
        for value in ["", "0", "no", " FALSE "] {
            let start = WorkerStartEnv::default().with([(NOSET_CUDA_VISIBLE_DEVICES, value)]);
            let env = start.task_env(TaskKind::Normal, "0", None, &HashMap::new());
            assert_eq!(kept(&env, CUDA_VISIBLE_DEVICES).as_deref(), Some("0"), "{value:?} is false");
        }
    }

    #[test]
    fn omp_num_threads_is_the_whole_cpus_asked_for_at_least_one() {
        let start = WorkerStartEnv::default();
        let omp = |kind, cpus| kept(&start.task_env(kind, "", cpus, &HashMap::new()), OMP_NUM_THREADS);
        assert_eq!(omp(TaskKind::Normal, Some(2.0)).as_deref(), Some("2"));
        assert_eq!(omp(TaskKind::Normal, Some(2.5)).as_deref(), Some("2"));
        assert_eq!(omp(TaskKind::Normal, Some(0.5)).as_deref(), Some("1"));
        assert_eq!(omp(TaskKind::Normal, None).as_deref(), Some("1"));
        assert_eq!(omp(TaskKind::ActorCreation, Some(4.0)).as_deref(), Some("4"));
        assert_eq!(omp(TaskKind::ActorTask, Some(4.0)), None, "an actor's calls keep its creation's");
        let own = start.task_env(TaskKind::Normal, "", Some(2.0), &vars(&[(OMP_NUM_THREADS, "7")]));
        assert_eq!(kept(&own, OMP_NUM_THREADS), None, "the runtime_env's own value stands");
        let node = start.with([(OMP_NUM_THREADS, "3")]);
        assert_eq!(kept(&node.task_env(TaskKind::Normal, "", Some(2.0), &HashMap::new()), OMP_NUM_THREADS), None);
    }
}
