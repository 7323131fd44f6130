//! Which replica gets a request: power of two choices over the replicas with room, by the
//! requests this proxy has in flight to each (Ray's router); a request for a multiplexed model
//! chooses among the replicas that hold it (by the table, or where this proxy sent the model
//! before) when one has room. A request that finds every replica at `max_ongoing_requests` waits
//! here, up to `max_queued_requests` of them per application, and is sent as soon as a request
//! ends or the table brings a new replica.

use oxray_serve::routes::{ReplicaTarget, Route};
use parking_lot::Mutex;
use rand::seq::IndexedRandom;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Default)]
struct Counts {
    /// Replica id -> requests in flight to it from this proxy.
    in_flight: HashMap<String, u32>,
    /// Application -> requests waiting for a replica.
    queued: HashMap<String, i64>,
    /// (application, model) -> the replica this proxy last sent the model's requests to.
    model_home: HashMap<(String, String), String>,
}

/// This proxy's load on each replica.
#[derive(Default)]
pub struct Loads {
    counts: Mutex<Counts>,
    /// Woken when a request ends or the route table changes.
    pub(crate) changed: Notify,
}

/// A request's place on a replica, given back when dropped.
pub struct Slot {
    loads: Arc<Loads>,
    pub replica: ReplicaTarget,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.loads.counts.lock();
        if let Some(n) = counts.in_flight.get_mut(&self.replica.replica_id) {
            *n -= 1;
            if *n == 0 {
                counts.in_flight.remove(&self.replica.replica_id);
            }
        }
        drop(counts);
        self.loads.changed.notify_waiters();
    }
}

/// Ray's `BackPressureError` text.
#[derive(Debug, PartialEq)]
pub struct Backpressure {
    pub queued: i64,
    pub max_queued: i64,
}

/// A waiting request's place in its application's queue.
pub struct Queued {
    loads: Arc<Loads>,
    app: String,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let mut counts = self.loads.counts.lock();
        if let Some(n) = counts.queued.get_mut(&self.app) {
            *n -= 1;
        }
    }
}

impl Loads {
    /// Requests of `app` waiting for a replica.
    #[cfg(test)]
    pub(crate) fn queued(&self, app: &str) -> i64 {
        self.counts.lock().queued.get(app).copied().unwrap_or(0)
    }

    /// A replica of `route` with room, or None; for `model`, one that holds it if one has room.
    pub fn try_take(self: &Arc<Self>, route: &Route, model: Option<&str>) -> Option<Slot> {
        let mut counts = self.counts.lock();
        let load = |r: &ReplicaTarget| counts.in_flight.get(&r.replica_id).copied().unwrap_or(0);
        let mut room: Vec<&ReplicaTarget> =
            route.replicas.iter().filter(|r| load(r) < route.max_ongoing_requests.max(1)).collect();
        if let Some(model) = model {
            // The replica this proxy sent the model to last, if it has room; else any that holds it.
            let home = counts.model_home.get(&(route.app.clone(), model.to_string()));
            let at_home: Vec<&ReplicaTarget> = room.iter().copied().filter(|r| Some(&r.replica_id) == home).collect();
            let holding: Vec<&ReplicaTarget> = if at_home.is_empty() {
                room.iter().copied().filter(|r| r.model_ids.iter().any(|m| m == model)).collect()
            } else {
                at_home
            };
            if !holding.is_empty() {
                room = holding;
            }
        }
        let picked = room.choose_multiple(&mut rand::rng(), 2).min_by_key(|r| load(r))?;
        let replica = (*picked).clone();
        *counts.in_flight.entry(replica.replica_id.clone()).or_insert(0) += 1;
        if let Some(model) = model {
            counts.model_home.insert((route.app.clone(), model.to_string()), replica.replica_id.clone());
        }
        Some(Slot { loads: self.clone(), replica })
    }

    /// This proxy's requests to `route`'s application: in flight to its replicas and waiting
    /// for one (what the autoscaler counts).
    pub fn requests(&self, route: &Route) -> u64 {
        let counts = self.counts.lock();
        let in_flight: u64 =
            route.replicas.iter().map(|r| u64::from(counts.in_flight.get(&r.replica_id).copied().unwrap_or(0))).sum();
        in_flight + counts.queued.get(&route.app).copied().unwrap_or(0).max(0) as u64
    }

    /// Joins `route`'s queue, or refuses when `max_queued_requests` wait already.
    pub fn enqueue(self: &Arc<Self>, route: &Route) -> Result<Queued, Backpressure> {
        let mut counts = self.counts.lock();
        let queued = counts.queued.entry(route.app.clone()).or_insert(0);
        if route.max_queued_requests >= 0 && *queued >= route.max_queued_requests {
            return Err(Backpressure { queued: *queued, max_queued: route.max_queued_requests });
        }
        *queued += 1;
        Ok(Queued { loads: self.clone(), app: route.app.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(replicas: usize, max_ongoing: u32, max_queued: i64) -> Route {
        Route {
            route_prefix: "/".into(),
            http: true,
            app: "app".into(),
            deployment: "D".into(),
            max_ongoing_requests: max_ongoing,
            max_queued_requests: max_queued,
            backpressure_status: 503,
            retry_after_s: None,
            replicas: (0..replicas)
                .map(|i| ReplicaTarget {
                    replica_id: format!("r{i}"),
                    actor_id: format!("{i:02x}"),
                    model_ids: Vec::new(),
                })
                .collect(),
            unavailable: None,
            metrics_interval_s: None,
        }
    }

    #[test]
    fn requests_spread_over_replicas_up_to_their_limit_and_slots_come_back() {
        let loads = Arc::new(Loads::default());
        let r = route(2, 2, -1);
        let slots: Vec<Slot> = (0..4).map(|_| loads.try_take(&r, None).expect("room")).collect();
        let on_first = slots.iter().filter(|s| s.replica.replica_id == "r0").count();
        assert_eq!(on_first, 2, "power of two choices over two replicas fills both evenly");
        assert!(loads.try_take(&r, None).is_none(), "every replica is at max_ongoing_requests");
        drop(slots);
        assert!(loads.try_take(&r, None).is_some());
    }

    #[test]
    fn a_models_requests_go_to_the_replica_that_holds_it_while_it_has_room() {
        let loads = Arc::new(Loads::default());
        let mut r = route(3, 2, -1);
        r.replicas[2].model_ids = vec!["m".into()];
        let first = loads.try_take(&r, Some("m")).unwrap();
        let second = loads.try_take(&r, Some("m")).unwrap();
        assert_eq!((first.replica.replica_id.as_str(), second.replica.replica_id.as_str()), ("r2", "r2"));
        let third = loads.try_take(&r, Some("m")).expect("another replica when its holder is full");
        assert_ne!(third.replica.replica_id, "r2");
        drop((first, second, third));
        // A model no replica holds yet: wherever its first request went, the next ones follow,
        // even once the table lists more replicas holding it.
        let new = loads.try_take(&r, Some("fresh")).unwrap().replica.replica_id.clone();
        for replica in &mut r.replicas {
            replica.model_ids.push("fresh".into());
        }
        for _ in 0..10 {
            assert_eq!(loads.try_take(&r, Some("fresh")).unwrap().replica.replica_id, new);
        }
    }

    #[test]
    fn the_queue_refuses_past_max_queued_requests() {
        let loads = Arc::new(Loads::default());
        let r = route(1, 1, 1);
        let first = loads.enqueue(&r).expect("one may wait");
        assert_eq!(loads.enqueue(&r).err(), Some(Backpressure { queued: 1, max_queued: 1 }));
        drop(first);
        assert!(loads.enqueue(&r).is_ok());
        assert!(loads.enqueue(&route(1, 1, -1)).is_ok(), "-1 is no limit");
    }
}
