//! A client process's view of the references it holds. Python `ObjectRef`s
//! count up and down here; the agent only hears when this process starts or
//! stops holding an object, batched and in net form.

use crate::ids::ObjectId;
use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct RefTable {
    counts: HashMap<ObjectId, u32>,
    reported: HashSet<ObjectId>,
    dirty: HashSet<ObjectId>,
}

impl RefTable {
    pub fn incref(&mut self, id: ObjectId) {
        let c = self.counts.entry(id).or_insert(0);
        *c += 1;
        if *c == 1 {
            self.dirty.insert(id);
        }
    }

    pub fn decref(&mut self, id: ObjectId) {
        if let Some(c) = self.counts.get_mut(&id) {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&id);
                self.dirty.insert(id);
            }
        }
    }

    /// Marks an id as already known to the agent as held (e.g. it registered the
    /// holder itself when the object was put).
    pub fn mark_reported(&mut self, id: ObjectId) {
        self.reported.insert(id);
    }

    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Net changes since the last call: (incref, decref).
    pub fn take_changes(&mut self) -> (Vec<ObjectId>, Vec<ObjectId>) {
        let mut inc = Vec::new();
        let mut dec = Vec::new();
        for id in self.dirty.drain() {
            let held = self.counts.contains_key(&id);
            let was = self.reported.contains(&id);
            if held && !was {
                self.reported.insert(id);
                inc.push(id);
            } else if !held && was {
                self.reported.remove(&id);
                dec.push(id);
            }
        }
        (inc, dec)
    }

    pub fn held_count(&self) -> usize {
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_only_net_changes() {
        let mut t = RefTable::default();
        let a = ObjectId::from_array([1; 16]);
        let b = ObjectId::from_array([2; 16]);
        t.incref(a);
        t.incref(a);
        t.incref(b);
        t.decref(b);
        let (inc, dec) = t.take_changes();
        assert_eq!(inc, vec![a]);
        assert!(dec.is_empty(), "b came and went between flushes");
        t.decref(a);
        assert_eq!(t.take_changes(), (vec![], vec![]));
        t.decref(a);
        assert_eq!(t.take_changes(), (vec![], vec![a]));
        assert!(!t.has_changes());
    }

    #[test]
    fn drop_then_reacquire_between_flushes_keeps_the_hold() {
        let mut t = RefTable::default();
        let a = ObjectId::from_array([3; 16]);
        t.incref(a);
        t.take_changes();
        t.decref(a);
        t.incref(a);
        assert_eq!(t.take_changes(), (vec![], vec![]));
        assert_eq!(t.held_count(), 1);
    }
}
