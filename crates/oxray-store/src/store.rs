//! Capacity accounting for one node: which objects exist, where their bytes
//! are, and spilling least-recently-used shared-memory objects to disk when a
//! new object does not fit in `object_store_memory`.

use crate::ObjectId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum ObjectPlace {
    Inline(Arc<Vec<u8>>),
    Shm(PathBuf),
    Spilled(PathBuf),
}

#[derive(Debug)]
struct Entry {
    size: usize,
    place: ObjectPlace,
    sealed: bool,
    last_use: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpillEvent {
    pub object_id: ObjectId,
    pub size: usize,
    pub to: PathBuf,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    pub capacity: usize,
    pub shm_used: usize,
    pub spilled_bytes: usize,
    pub inline_bytes: usize,
    pub num_objects: usize,
    pub num_spilled_total: u64,
}

pub struct ObjectStore {
    capacity: usize,
    shm_dir: PathBuf,
    spill_dir: PathBuf,
    entries: HashMap<ObjectId, Entry>,
    shm_used: usize,
    tick: u64,
    num_spilled_total: u64,
}

fn file_name(id: &ObjectId) -> String {
    hex::encode(id)
}

impl ObjectStore {
    pub fn new(shm_dir: PathBuf, spill_dir: PathBuf, capacity: usize) -> std::io::Result<Self> {
        std::fs::create_dir_all(&shm_dir)?;
        Ok(ObjectStore {
            capacity,
            shm_dir,
            spill_dir,
            entries: HashMap::new(),
            shm_used: 0,
            tick: 0,
            num_spilled_total: 0,
        })
    }

    pub fn shm_dir(&self) -> &Path {
        &self.shm_dir
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Reserves room for a `size`-byte object and says which file to write it to.
    /// Spills other objects when shared memory is full; an object larger than the
    /// whole store goes straight to the spill directory.
    pub fn reserve(&mut self, id: ObjectId, size: usize) -> std::io::Result<(PathBuf, Vec<SpillEvent>)> {
        if let Some(old) = self.entries.get(&id) {
            let path = match &old.place {
                ObjectPlace::Shm(p) | ObjectPlace::Spilled(p) => p.clone(),
                ObjectPlace::Inline(_) => self.shm_dir.join(file_name(&id)),
            };
            return Ok((path, Vec::new()));
        }
        let mut spills = Vec::new();
        let place = if size > self.capacity {
            std::fs::create_dir_all(&self.spill_dir)?;
            ObjectPlace::Spilled(self.spill_dir.join(file_name(&id)))
        } else {
            while self.shm_used + size > self.capacity {
                match self.spill_one()? {
                    Some(event) => spills.push(event),
                    None => break,
                }
            }
            if self.shm_used + size > self.capacity {
                // Everything left is still being written: put this one on disk.
                std::fs::create_dir_all(&self.spill_dir)?;
                ObjectPlace::Spilled(self.spill_dir.join(file_name(&id)))
            } else {
                self.shm_used += size;
                ObjectPlace::Shm(self.shm_dir.join(file_name(&id)))
            }
        };
        let path = match &place {
            ObjectPlace::Shm(p) | ObjectPlace::Spilled(p) => p.clone(),
            ObjectPlace::Inline(_) => unreachable!("reserve never places inline"),
        };
        let last_use = self.next_tick();
        self.entries.insert(id, Entry { size, place, sealed: false, last_use });
        Ok((path, spills))
    }

    /// Marks a reserved file object as fully written and readable.
    pub fn seal(&mut self, id: &ObjectId) -> bool {
        let tick = self.next_tick();
        match self.entries.get_mut(id) {
            Some(e) => {
                e.sealed = true;
                e.last_use = tick;
                true
            }
            None => false,
        }
    }

    pub fn insert_inline(&mut self, id: ObjectId, data: Vec<u8>) {
        let last_use = self.next_tick();
        let size = data.len();
        if let Some(old) =
            self.entries.insert(id, Entry { size, place: ObjectPlace::Inline(Arc::new(data)), sealed: true, last_use })
        {
            self.release(&id, old);
        }
    }

    pub fn contains_sealed(&self, id: &ObjectId) -> bool {
        self.entries.get(id).is_some_and(|e| e.sealed)
    }

    /// The sealed object's place and size, marking it recently used.
    pub fn lookup(&mut self, id: &ObjectId) -> Option<(ObjectPlace, usize)> {
        let tick = self.next_tick();
        let e = self.entries.get_mut(id).filter(|e| e.sealed)?;
        e.last_use = tick;
        Some((e.place.clone(), e.size))
    }

    /// Forgets the object and removes its file. Readers that mapped it keep their pages.
    pub fn free(&mut self, id: &ObjectId) -> bool {
        match self.entries.remove(id) {
            Some(e) => {
                self.release(id, e);
                true
            }
            None => false,
        }
    }

    fn release(&mut self, _id: &ObjectId, e: Entry) {
        match e.place {
            ObjectPlace::Shm(path) => {
                self.shm_used -= e.size;
                let _ = std::fs::remove_file(path);
            }
            ObjectPlace::Spilled(path) => {
                let _ = std::fs::remove_file(path);
            }
            ObjectPlace::Inline(_) => {}
        }
    }

    /// Moves the least recently used sealed shm object to the spill directory.
    fn spill_one(&mut self) -> std::io::Result<Option<SpillEvent>> {
        let victim = self
            .entries
            .iter()
            .filter(|(_, e)| e.sealed && matches!(e.place, ObjectPlace::Shm(_)))
            .min_by_key(|(_, e)| e.last_use)
            .map(|(id, _)| *id);
        let Some(id) = victim else { return Ok(None) };
        std::fs::create_dir_all(&self.spill_dir)?;
        let to = self.spill_dir.join(file_name(&id));
        let entry = self.entries.get_mut(&id).expect("victim exists");
        let ObjectPlace::Shm(from) = &entry.place else { unreachable!("victim is in shm") };
        std::fs::copy(from, &to)?;
        std::fs::remove_file(from)?;
        entry.place = ObjectPlace::Spilled(to.clone());
        let size = entry.size;
        self.shm_used -= size;
        self.num_spilled_total += 1;
        Ok(Some(SpillEvent { object_id: id, size, to }))
    }

    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats {
            capacity: self.capacity,
            shm_used: self.shm_used,
            num_objects: self.entries.len(),
            num_spilled_total: self.num_spilled_total,
            ..Default::default()
        };
        for e in self.entries.values() {
            match e.place {
                ObjectPlace::Spilled(_) => stats.spilled_bytes += e.size,
                ObjectPlace::Inline(_) => stats.inline_bytes += e.size,
                ObjectPlace::Shm(_) => {}
            }
        }
        stats
    }

    /// Removes every object file and both directories.
    pub fn destroy(&mut self) {
        self.entries.clear();
        self.shm_used = 0;
        let _ = crate::remove_dir_if_exists(&self.shm_dir);
        let _ = crate::remove_dir_if_exists(&self.spill_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        [n; 16]
    }

    fn temp_store(capacity: usize) -> (ObjectStore, PathBuf) {
        let root = std::env::temp_dir().join(format!("oxray-store-test-{}", rand::random::<u64>()));
        let store = ObjectStore::new(root.join("shm"), root.join("spill"), capacity).unwrap();
        (store, root)
    }

    fn write_and_seal(store: &mut ObjectStore, n: u8, size: usize) -> PathBuf {
        let (path, _) = store.reserve(id(n), size).unwrap();
        std::fs::write(&path, vec![n; size]).unwrap();
        assert!(store.seal(&id(n)));
        path
    }

    #[test]
    fn spills_least_recently_used_when_full() {
        let (mut store, root) = temp_store(100);
        write_and_seal(&mut store, 1, 40);
        write_and_seal(&mut store, 2, 40);
        store.lookup(&id(1)); // 2 is now the least recently used
        let (_, spills) = store.reserve(id(3), 40).unwrap();
        assert_eq!(spills.len(), 1);
        assert_eq!(spills[0].object_id, id(2));
        let (place, size) = store.lookup(&id(2)).unwrap();
        assert_eq!(size, 40);
        let ObjectPlace::Spilled(p) = place else { panic!("expected spilled, got {place:?}") };
        assert_eq!(std::fs::read(p).unwrap(), vec![2u8; 40]);
        assert_eq!(store.stats().shm_used, 80);
        assert_eq!(store.stats().spilled_bytes, 40);
        store.destroy();
        assert!(!root.join("shm").exists());
    }

    #[test]
    fn object_larger_than_capacity_goes_to_disk() {
        let (mut store, _root) = temp_store(10);
        let (path, spills) = store.reserve(id(9), 50).unwrap();
        assert!(spills.is_empty());
        assert!(path.starts_with(_root.join("spill")));
        assert_eq!(store.stats().shm_used, 0);
        store.destroy();
    }

    #[test]
    fn free_releases_capacity_and_file() {
        let (mut store, _root) = temp_store(100);
        let path = write_and_seal(&mut store, 1, 60);
        assert!(store.free(&id(1)));
        assert!(!path.exists());
        assert_eq!(store.stats().shm_used, 0);
        assert!(!store.free(&id(1)));
        // Unsealed objects are invisible to readers and never spilled.
        store.reserve(id(2), 60).unwrap();
        assert!(store.lookup(&id(2)).is_none());
        let (_, spills) = store.reserve(id(3), 60).unwrap();
        assert!(spills.is_empty(), "an unsealed object must not be spilled");
        store.destroy();
    }

    #[test]
    fn inline_objects_are_looked_up_in_memory() {
        let (mut store, _root) = temp_store(100);
        store.insert_inline(id(4), vec![1, 2, 3]);
        assert!(store.contains_sealed(&id(4)));
        assert_eq!(store.lookup(&id(4)).unwrap().0, ObjectPlace::Inline(Arc::new(vec![1, 2, 3])));
        assert_eq!(store.stats().inline_bytes, 3);
        store.destroy();
    }
}
