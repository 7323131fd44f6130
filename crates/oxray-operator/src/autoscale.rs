//! The in-tree autoscaler's decision, a pure function: the head's pending
//! demand and its nodes' use in, each worker group's desired size and the idle
//! workers to remove out.
//!
//! Demand first fills what is free: the nodes' available resources, then the
//! whole of each worker that is starting or about to be created. What is left
//! is packed into new workers, of the first group (in spec order) whose worker
//! can hold it and that is below `maxReplicas`. A group that got no new worker
//! gives back workers whose nodes have been idle (nothing in use) for the idle
//! timeout, down to `minReplicas`. Demand no group can hold is reported.

use crate::resources::{ResourceMap, fits, subtract};
use crate::spec::GroupPlan;
use std::collections::BTreeSet;

/// At most this many single requests are packed per decision (the rest wait for the next one).
const MAX_REQUESTS: usize = 10_000;

/// What the head reports (`GET /api/cluster_status`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Demand {
    /// Shapes of work waiting for resources, each with how many wait.
    pub requests: Vec<(ResourceMap, u32)>,
    /// Placement groups waiting with STRICT_SPREAD: their bundles, each on a node of its own.
    pub spread_groups: Vec<Vec<ResourceMap>>,
    pub nodes: Vec<NodeUsage>,
}

/// One live node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeUsage {
    /// The node's address (a pod's IP).
    pub ip: String,
    pub total: ResourceMap,
    pub available: ResourceMap,
    /// How long nothing has been in use on it.
    pub idle_ms: u64,
}

/// A worker pod that exists and is not being deleted.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerView {
    pub pod: String,
    /// Its IP once it has one.
    pub ip: Option<String>,
}

/// One group as the decision sees it.
#[derive(Clone, Debug)]
pub struct GroupState<'a> {
    pub plan: &'a GroupPlan,
    /// The size decided last time (or the spec's `replicas` the first time).
    pub baseline: i32,
    pub workers: Vec<WorkerView>,
}

impl GroupState<'_> {
    /// The group's size now: the last decision, or the pods that exist where there are more
    /// (the last decision may not have been recorded yet).
    pub fn current(&self) -> i32 {
        self.baseline.max(self.workers.len() as i32)
    }
}

/// The autoscaler's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Per group, in spec order.
    pub desired: Vec<i32>,
    /// Idle workers' pods to delete.
    pub remove: Vec<String>,
    /// Shapes no group's worker can hold.
    pub unschedulable: Vec<ResourceMap>,
}

/// Free room that demand can fill without a new worker.
struct Room {
    available: ResourceMap,
    /// The node's IP, for a live node (so that it is not removed as idle).
    node_ip: Option<String>,
}

/// Rooms and new workers one request (or one spread group) already used.
#[derive(Default)]
struct Taken {
    rooms: BTreeSet<usize>,
    new_workers: BTreeSet<usize>,
}

/// Demand packed so far.
struct Packing<'g, 'p> {
    groups: &'g [GroupState<'p>],
    rooms: Vec<Room>,
    /// New workers: group index and the room left in it.
    new_workers: Vec<(usize, ResourceMap)>,
    added: Vec<i32>,
    used_nodes: BTreeSet<String>,
    unschedulable: Vec<ResourceMap>,
}

impl Packing<'_, '_> {
    /// Puts `request` in free room, else in a new worker's room, else in a new worker of the first
    /// group that holds it and is below its maximum; skips what `taken` lists and adds what it used.
    fn place(&mut self, request: &ResourceMap, taken: &mut Taken) {
        let room =
            self.rooms.iter().enumerate().position(|(i, r)| !taken.rooms.contains(&i) && fits(request, &r.available));
        if let Some(i) = room {
            let room = &mut self.rooms[i];
            subtract(&mut room.available, request);
            if let Some(ip) = &room.node_ip {
                self.used_nodes.insert(ip.clone());
            }
            taken.rooms.insert(i);
            return;
        }
        let open = self
            .new_workers
            .iter()
            .enumerate()
            .position(|(i, (_, left))| !taken.new_workers.contains(&i) && fits(request, left));
        if let Some(i) = open {
            subtract(&mut self.new_workers[i].1, request);
            taken.new_workers.insert(i);
            return;
        }
        let holds = |g: &GroupState<'_>| g.plan.resources.as_ref().is_some_and(|shape| fits(request, shape));
        let added = &self.added;
        let group = self
            .groups
            .iter()
            .enumerate()
            .find(|(i, g)| holds(g) && i64::from(g.current()) + i64::from(added[*i]) < i64::from(g.plan.max));
        match group {
            // A group could hold it but is at its maxReplicas: it waits.
            None if self.groups.iter().any(holds) => {}
            Some((i, g)) => {
                let mut left = g.plan.resources.clone().unwrap_or_default();
                subtract(&mut left, request);
                taken.new_workers.insert(self.new_workers.len());
                self.new_workers.push((i, left));
                self.added[i] += 1;
            }
            None => {
                if !self.unschedulable.contains(request) {
                    self.unschedulable.push(request.clone());
                }
            }
        }
    }
}

/// The number a worker pod's name ends with (`<cluster>-worker-<group>-<n>`).
pub(crate) fn pod_index(pod: &str) -> u64 {
    pod.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Decides each group's size for `demand`.
pub fn decide(groups: &[GroupState<'_>], demand: &Demand, idle_timeout_ms: u64) -> Decision {
    let mut rooms: Vec<Room> =
        demand.nodes.iter().map(|n| Room { available: n.available.clone(), node_ip: Some(n.ip.clone()) }).collect();
    let live_ip = |ip: &Option<String>| ip.as_ref().is_some_and(|ip| demand.nodes.iter().any(|n| &n.ip == ip));
    for group in groups {
        let Some(shape) = &group.plan.resources else { continue };
        let starting = group.workers.iter().filter(|w| !live_ip(&w.ip)).count();
        let to_create = (group.baseline.max(0) as usize).saturating_sub(group.workers.len());
        for _ in 0..starting + to_create {
            rooms.push(Room { available: shape.clone(), node_ip: None });
        }
    }

    let mut packing = Packing {
        groups,
        rooms,
        new_workers: Vec::new(),
        added: vec![0i32; groups.len()],
        used_nodes: BTreeSet::new(),
        unschedulable: Vec::new(),
    };
    // A STRICT_SPREAD group's bundles each need a node of their own: never two in one room or new worker.
    for bundles in &demand.spread_groups {
        let mut taken = Taken::default();
        for bundle in bundles {
            packing.place(bundle, &mut taken);
        }
    }
    let requests = demand.requests.iter().flat_map(|(shape, n)| std::iter::repeat_n(shape, *n as usize));
    for request in requests.take(MAX_REQUESTS) {
        packing.place(request, &mut Taken::default());
    }
    let Packing { added, used_nodes, unschedulable, .. } = packing;

    let mut desired = Vec::with_capacity(groups.len());
    let mut remove = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let (min, max) = (group.plan.min, group.plan.max);
        // Workers that exist stay unless idle.
        let mut size = (i64::from(group.current()) + i64::from(added[i])).clamp(i64::from(min), i64::from(max)) as i32;
        if added[i] == 0 {
            let mut idle: Vec<&WorkerView> = group
                .workers
                .iter()
                .filter(|w| {
                    w.ip.as_ref().is_some_and(|ip| {
                        !used_nodes.contains(ip)
                            && demand.nodes.iter().any(|n| &n.ip == ip && n.idle_ms >= idle_timeout_ms)
                    })
                })
                .collect();
            // The newest (highest-numbered) workers go first.
            idle.sort_by_key(|w| std::cmp::Reverse(pod_index(&w.pod)));
            let existing = group.workers.len() as i32;
            let removable = (existing.min(size) - min).max(0) as usize;
            for w in idle.into_iter().take(removable) {
                remove.push(w.pod.clone());
                size -= 1;
            }
        }
        desired.push(size);
    }
    Decision { desired, remove, unschedulable }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, f64)]) -> ResourceMap {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn group(name: &str, min: i32, max: i32, cpus: f64) -> GroupPlan {
        GroupPlan {
            name: name.to_string(),
            min,
            max,
            replicas: min,
            resources: Some(map(&[("CPU", cpus)])),
            args: vec![],
        }
    }

    fn worker(pod: &str, ip: Option<&str>) -> WorkerView {
        WorkerView { pod: pod.to_string(), ip: ip.map(str::to_string) }
    }

    fn node(ip: &str, total: f64, available: f64, idle_ms: u64) -> NodeUsage {
        NodeUsage { ip: ip.to_string(), total: map(&[("CPU", total)]), available: map(&[("CPU", available)]), idle_ms }
    }

    #[test]
    fn demand_that_does_not_fit_adds_workers_up_to_max() {
        let g = group("cpu", 0, 3, 2.0);
        let groups = [GroupState { plan: &g, baseline: 0, workers: vec![] }];
        // The head has no CPUs; five 2-CPU tasks wait.
        let demand = Demand {
            spread_groups: vec![],
            requests: vec![(map(&[("CPU", 2.0)]), 5)],
            nodes: vec![node("10.0.0.1", 0.0, 0.0, 0)],
        };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![3], "capped at maxReplicas");
        assert!(d.remove.is_empty());
        assert!(d.unschedulable.is_empty(), "it fits a worker; only the cap holds it back");
    }

    #[test]
    fn small_requests_are_packed_into_one_worker() {
        let g = group("cpu", 0, 10, 4.0);
        let groups = [GroupState { plan: &g, baseline: 0, workers: vec![] }];
        let demand = Demand { spread_groups: vec![], requests: vec![(map(&[("CPU", 1.0)]), 6)], nodes: vec![] };
        assert_eq!(
            decide(&groups, &demand, 60_000).desired,
            vec![2],
            "6 x 1 CPU fill one 4-CPU worker and half another"
        );
    }

    #[test]
    fn demand_that_fits_free_room_or_starting_workers_adds_nothing() {
        let g = group("cpu", 0, 10, 2.0);
        let groups = [GroupState {
            plan: &g,
            baseline: 2,
            workers: vec![worker("c-cpu-0", Some("10.0.0.2")), worker("c-cpu-1", None)],
        }];
        // 1 CPU free on the live worker, the starting one will offer 2.
        let demand = Demand {
            spread_groups: vec![],
            requests: vec![(map(&[("CPU", 1.0)]), 3)],
            nodes: vec![node("10.0.0.1", 0.0, 0.0, 0), node("10.0.0.2", 2.0, 1.0, 0)],
        };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![2]);
        assert!(d.remove.is_empty());
    }

    #[test]
    fn the_first_group_that_fits_grows() {
        let small = group("small", 0, 5, 1.0);
        let big = group("big", 0, 5, 8.0);
        let groups = [
            GroupState { plan: &small, baseline: 0, workers: vec![] },
            GroupState { plan: &big, baseline: 0, workers: vec![] },
        ];
        let demand = Demand {
            spread_groups: vec![],
            requests: vec![(map(&[("CPU", 4.0)]), 1), (map(&[("CPU", 1.0)]), 1)],
            nodes: vec![],
        };
        let d = decide(&groups, &demand, 60_000);
        // The 4-CPU task needs a big worker; the 1-CPU task fits the room left in it.
        assert_eq!(d.desired, vec![0, 1]);
    }

    #[test]
    fn demand_no_group_can_hold_is_reported_not_scaled_for() {
        let g = group("cpu", 0, 5, 2.0);
        let groups = [GroupState { plan: &g, baseline: 0, workers: vec![] }];
        let gpu = map(&[("GPU", 1.0)]);
        let demand = Demand { spread_groups: vec![], requests: vec![(gpu.clone(), 4)], nodes: vec![] };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![0]);
        assert_eq!(d.unschedulable, vec![gpu], "reported once per shape");
    }

    #[test]
    fn idle_workers_are_removed_after_the_timeout_down_to_min() {
        let g = group("cpu", 1, 5, 2.0);
        let workers = vec![
            worker("c-cpu-0", Some("10.0.0.2")),
            worker("c-cpu-1", Some("10.0.0.3")),
            worker("c-cpu-2", Some("10.0.0.4")),
        ];
        let groups = [GroupState { plan: &g, baseline: 3, workers }];
        let demand = Demand {
            spread_groups: vec![],
            requests: vec![],
            nodes: vec![
                node("10.0.0.2", 2.0, 2.0, 120_000),
                node("10.0.0.3", 2.0, 2.0, 120_000),
                node("10.0.0.4", 2.0, 2.0, 120_000),
            ],
        };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![1], "down to minReplicas");
        assert_eq!(d.remove, vec!["c-cpu-2".to_string(), "c-cpu-1".to_string()], "newest first");

        // By number, not by name: worker 10 is newer than worker 9.
        let workers = vec![worker("c-cpu-9", Some("10.0.0.2")), worker("c-cpu-10", Some("10.0.0.3"))];
        let groups = [GroupState { plan: &g, baseline: 2, workers }];
        let demand = Demand {
            nodes: vec![node("10.0.0.2", 2.0, 2.0, 120_000), node("10.0.0.3", 2.0, 2.0, 120_000)],
            ..Default::default()
        };
        assert_eq!(decide(&groups, &demand, 60_000).remove, vec!["c-cpu-10".to_string()]);
    }

    #[test]
    fn workers_idle_for_less_than_the_timeout_or_busy_stay() {
        let g = group("cpu", 0, 5, 2.0);
        let workers = vec![worker("c-cpu-0", Some("10.0.0.2")), worker("c-cpu-1", Some("10.0.0.3"))];
        let groups = [GroupState { plan: &g, baseline: 2, workers }];
        let demand = Demand {
            spread_groups: vec![],
            requests: vec![],
            nodes: vec![node("10.0.0.2", 2.0, 2.0, 59_000), node("10.0.0.3", 2.0, 1.0, 0)],
        };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![2]);
        assert!(d.remove.is_empty());
    }

    #[test]
    fn an_idle_worker_that_pending_demand_will_use_stays() {
        let g = group("cpu", 0, 5, 2.0);
        let groups = [GroupState { plan: &g, baseline: 1, workers: vec![worker("c-cpu-0", Some("10.0.0.2"))] }];
        let demand = Demand {
            spread_groups: vec![],
            requests: vec![(map(&[("CPU", 2.0)]), 1)],
            nodes: vec![node("10.0.0.2", 2.0, 2.0, 600_000)],
        };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![1]);
        assert!(d.remove.is_empty());
    }

    #[test]
    fn a_strict_spread_group_gets_a_new_worker_per_bundle() {
        let g = group("cpu", 0, 5, 4.0);
        let groups = [GroupState { plan: &g, baseline: 0, workers: vec![] }];
        let demand = Demand { spread_groups: vec![vec![map(&[("CPU", 1.0)]); 3]], ..Default::default() };
        assert_eq!(decide(&groups, &demand, 60_000).desired, vec![3], "three bundles, three nodes");
        // One worker already starting takes one bundle; the others need two more.
        let groups = [GroupState { plan: &g, baseline: 1, workers: vec![worker("c-cpu-0", None)] }];
        assert_eq!(decide(&groups, &demand, 60_000).desired, vec![3]);
    }

    #[test]
    fn starting_workers_the_last_decision_did_not_record_are_kept() {
        let g = group("cpu", 0, 5, 1.0);
        let workers = vec![worker("c-cpu-0", None), worker("c-cpu-1", None), worker("c-cpu-2", None)];
        // The status still says 0 (its update has not been seen), the pods exist and the demand waits for them.
        let groups = [GroupState { plan: &g, baseline: 0, workers }];
        let demand = Demand { spread_groups: vec![], requests: vec![(map(&[("CPU", 1.0)]), 3)], nodes: vec![] };
        let d = decide(&groups, &demand, 60_000);
        assert_eq!(d.desired, vec![3]);
        assert!(d.remove.is_empty());
    }

    #[test]
    fn without_demand_the_size_stays_within_bounds() {
        let g = group("cpu", 2, 4, 2.0);
        let groups = [GroupState { plan: &g, baseline: 7, workers: vec![] }];
        assert_eq!(decide(&groups, &Demand::default(), 60_000).desired, vec![4]);
        let groups = [GroupState { plan: &g, baseline: 0, workers: vec![] }];
        assert_eq!(decide(&groups, &Demand::default(), 60_000).desired, vec![2]);
    }
}
