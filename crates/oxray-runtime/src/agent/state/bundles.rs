//! Placement-group bundles held on this node, in two phases at the head's
//! request: reserved (taken from what tasks may use, not yet usable), then
//! committed (usable under the names Ray gives them) once every node of the
//! group has reserved. A group the head gives up on is returned, and whatever
//! runs in its bundles dies with it; a reserved one has run nothing. A
//! reservation never committed (its head died between the phases) lapses.

use super::{Action, AgentState, TaskState};
use crate::agent::AgentError;
use crate::ids::PlacementGroupId;
use crate::resources::{ResourceSet, group_names};
use std::collections::HashMap;

/// Heartbeats (one a second) a reservation waits for its commit before it
/// lapses. The head commits within seconds; one that died between the phases never will.
pub(super) const RESERVATION_BEATS: u32 = 60;

/// The placement groups holding resources of this node.
#[derive(Default)]
pub(super) struct BundleTable {
    /// Reserved, waiting for the head's commit.
    reserved: HashMap<PlacementGroupId, Reservation>,
    /// Committed: what each group took from this node's available resources.
    held: HashMap<PlacementGroupId, ResourceSet>,
}

struct Reservation {
    /// The bundles, by index.
    bundles: Vec<(u32, ResourceSet)>,
    /// Heartbeats since it was made.
    beats: u32,
}

impl AgentState {
    /// Reserves `bundles` of a placement group on this node, all of them or
    /// none. Nothing can use them until [`AgentState::commit_bundles`]: the
    /// head may still give the group up if another node cannot reserve its share.
    pub fn reserve_bundles(
        &mut self,
        pg_id: PlacementGroupId,
        bundles: &[(u32, ResourceSet)],
    ) -> Result<(), AgentError> {
        if self.bundles.held.contains_key(&pg_id) || self.bundles.reserved.contains_key(&pg_id) {
            return Ok(());
        }
        let sum = sum_of(bundles);
        if !self.available.fits(&sum) {
            return Err(AgentError::BundlesDoNotFit {
                node: self.node_id.short(),
                available: self.available.clone(),
                wanted: sum,
            });
        }
        self.available.subtract(&sum);
        self.bundles.reserved.insert(pg_id, Reservation { bundles: bundles.to_vec(), beats: 0 });
        Ok(())
    }

    /// Makes a reserved group's bundles usable here: every node of the group
    /// has reserved its share. Committing a committed group does nothing.
    pub fn commit_bundles(&mut self, pg_id: PlacementGroupId, now_ms: u64) -> Result<(), AgentError> {
        if self.bundles.held.contains_key(&pg_id) {
            return Ok(());
        }
        let bundles = self.bundles.reserved.remove(&pg_id).ok_or(AgentError::BundlesNotReserved(pg_id))?.bundles;
        let sum = sum_of(&bundles);
        self.available.add(&sum);
        for (index, b) in &bundles {
            group_names::hold_bundle(&mut self.total, &mut self.available, &pg_id, *index, b);
        }
        self.bundles.held.insert(pg_id, sum);
        self.schedule(now_ms);
        Ok(())
    }

    /// One heartbeat went by: reservations left uncommitted for
    /// [`RESERVATION_BEATS`] are given back (a late commit then fails, and the
    /// head gives the group up and places it again).
    pub fn age_reservations(&mut self, now_ms: u64) {
        let lapsed: Vec<PlacementGroupId> = self
            .bundles
            .reserved
            .iter_mut()
            .filter_map(|(id, r)| {
                r.beats += 1;
                (r.beats > RESERVATION_BEATS).then_some(*id)
            })
            .collect();
        for pg_id in lapsed {
            self.actions.push(Action::info(format!(
                "gave back the bundles of placement group {pg_id}: reserved {RESERVATION_BEATS} s ago and never committed"
            )));
            self.return_bundles(pg_id, now_ms);
        }
    }

    /// Gives a placement group's bundles back: what runs in them is killed.
    pub fn return_bundles(&mut self, pg_id: PlacementGroupId, now_ms: u64) {
        if let Some(reservation) = self.bundles.reserved.remove(&pg_id) {
            // Reserved only: nothing ran in it.
            self.available.add(&sum_of(&reservation.bundles));
            self.schedule(now_ms);
            return;
        }
        let Some(sum) = self.bundles.held.remove(&pg_id) else { return };
        let uses_group = |holds: &ResourceSet| group_names::uses_group(holds, &pg_id);
        let running: Vec<u32> = self
            .tasks
            .values()
            .filter(|t| uses_group(&t.holds) || uses_group(&t.placement))
            .filter_map(|t| match t.state {
                TaskState::Running(w) => self.workers.get(&w).map(|w| w.pid),
                _ => None,
            })
            .chain(
                self.actors
                    .values()
                    .filter(|a| a.held.as_ref().is_some_and(|(_, h)| uses_group(h)))
                    .filter_map(|a| a.worker.and_then(|w| self.workers.get(&w)).map(|w| w.pid)),
            )
            .filter(|pid| *pid != 0)
            .collect();
        for pid in running {
            self.actions.push(Action::Signal { pid, signal: libc::SIGKILL });
        }
        group_names::drop_group(&mut self.total, &pg_id);
        group_names::drop_group(&mut self.available, &pg_id);
        self.available.add(&sum);
        self.schedule(now_ms);
    }
}

fn sum_of(bundles: &[(u32, ResourceSet)]) -> ResourceSet {
    let mut sum = ResourceSet::new();
    for (_, b) in bundles {
        sum.add(b);
    }
    sum
}
