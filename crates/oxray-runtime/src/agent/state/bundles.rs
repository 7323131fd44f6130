//! Placement-group bundles held on this node: reserved all-or-none at the
//! head's request, named as Ray names them, and given back with what runs in them.

use super::{Action, AgentState, TaskState};
use crate::agent::AgentError;
use crate::ids::PlacementGroupId;
use crate::resources::ResourceSet;
use std::collections::HashMap;

/// What each placement group took from this node's available resources.
#[derive(Default)]
pub(super) struct BundleTable {
    held: HashMap<PlacementGroupId, ResourceSet>,
}

impl AgentState {
    /// Holds `bundles` of a placement group on this node: all of them or none.
    pub fn reserve_bundles(
        &mut self,
        pg_id: PlacementGroupId,
        bundles: &[(u32, ResourceSet)],
    ) -> Result<(), AgentError> {
        if self.bundles.held.contains_key(&pg_id) {
            return Ok(());
        }
        let mut sum = ResourceSet::new();
        for (_, b) in bundles {
            sum.add(b);
        }
        if !self.available.fits(&sum) {
            return Err(AgentError::BundlesDoNotFit {
                node: self.node_id.short(),
                available: self.available.clone(),
                wanted: sum,
            });
        }
        let pg_hex = pg_id.hex();
        for (index, b) in bundles {
            crate::resources::hold_bundle(&mut self.total, &mut self.available, &pg_hex, *index, b);
        }
        self.bundles.held.insert(pg_id, sum);
        self.schedule();
        Ok(())
    }

    /// Gives a placement group's bundles back: what runs in them is killed.
    pub fn return_bundles(&mut self, pg_id: PlacementGroupId) {
        let Some(sum) = self.bundles.held.remove(&pg_id) else { return };
        let pg_hex = pg_id.hex();
        let uses_group = |holds: &ResourceSet| holds.names().any(|n| n.ends_with(&pg_hex));
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
        self.total.remove_containing(&pg_hex);
        self.available.remove_containing(&pg_hex);
        self.available.add(&sum);
        self.schedule();
    }
}
