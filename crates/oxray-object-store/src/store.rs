//! Capacity accounting for one node's objects: large objects live in ranges of
//! the shared-memory arena; when it is full, least-recently-used objects that no
//! process is reading are spilled to disk. A freed range is reused only after
//! every reader has released it, so views handed out never change under a reader.

use crate::ObjectId;
use crate::arena::ArenaAllocator;
use memmap2::{MmapOptions, MmapRaw};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum ObjectPlace {
    Inline(Arc<Vec<u8>>),
    /// `len` bytes at `offset` in the arena file.
    Arena {
        offset: usize,
        len: usize,
    },
    Spilled(PathBuf),
}

#[derive(Debug)]
struct Entry {
    size: usize,
    place: ObjectPlace,
    sealed: bool,
    /// The object was freed but readers still view its range (or it is being spilled).
    freed: bool,
    readers: u32,
    /// A `SpillJob` is copying it to disk: its range stays allocated until `finish_spill`.
    spilling: bool,
    last_use: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpillEvent {
    pub object_id: ObjectId,
    pub size: usize,
    pub to: PathBuf,
}

/// What `reserve` decided.
#[derive(Debug)]
pub enum Reserved {
    /// The object's room: write it there.
    Placed(ObjectPlace),
    /// No room yet: run these copies (outside any lock), report each with
    /// `finish_spill`, then reserve again.
    SpillFirst(Vec<SpillJob>),
}

/// Copies one sealed arena object to its spill file. Built under the store's
/// owner's lock, run without it: the bytes stay allocated to the object until
/// `finish_spill`, and sealed objects are never written, so the copy needs no lock.
#[derive(Debug)]
pub struct SpillJob {
    pub object_id: ObjectId,
    offset: usize,
    len: usize,
    to: PathBuf,
    arena: Arc<MmapRaw>,
}

impl SpillJob {
    /// Writes the object's bytes to its spill file (blocking I/O).
    pub fn run(&self) -> std::io::Result<()> {
        if let Some(dir) = self.to.parent() {
            crate::create_private_dir_all(dir)?;
        }
        // SAFETY: the range belongs to a sealed object marked `spilling`, which keeps
        // it allocated and unwritten until `finish_spill` is called for this job.
        let bytes = unsafe { std::slice::from_raw_parts(self.arena.as_ptr().add(self.offset), self.len) };
        crate::write_private_file(&self.to, bytes)
    }
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

/// Backs `len` bytes at `offset` of the arena file with real pages.
type ReservePages = fn(&File, usize, usize) -> std::io::Result<()>;

fn posix_fallocate(file: &File, offset: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: the fd is valid for the call; posix_fallocate only allocates blocks of the file.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), offset as libc::off_t, len as libc::off_t) } {
        0 => Ok(()),
        rc => Err(std::io::Error::from_raw_os_error(rc)),
    }
}

pub struct ObjectStore {
    shm_dir: PathBuf,
    spill_dir: PathBuf,
    arena_path: PathBuf,
    arena_map: Option<Arc<MmapRaw>>,
    arena_file: Option<File>,
    /// Ranges of the arena file that have pages (start -> end). The file is
    /// sparse: a range gets its pages when first reserved, so a full tmpfs is an
    /// error at `reserve` (and the object goes to disk) rather than a SIGBUS in
    /// the writer. Pages are never given back, so a reused range costs nothing.
    backed: BTreeMap<usize, usize>,
    reserve_pages: ReservePages,
    alloc: ArenaAllocator,
    entries: HashMap<ObjectId, Entry>,
    tick: u64,
    num_spilled_total: u64,
}

fn file_name(id: &ObjectId) -> String {
    id.hex()
}

impl ObjectStore {
    /// Creates the arena as a sparse file of `capacity` bytes: pages are
    /// allocated on first write and stay warm for reuse.
    pub fn new(shm_dir: PathBuf, spill_dir: PathBuf, capacity: usize) -> std::io::Result<Self> {
        crate::create_private_dir_all(&shm_dir)?;
        let arena_path = shm_dir.join("arena");
        let alloc = ArenaAllocator::new(capacity);
        let file =
            crate::private_file_options().read(true).write(true).create(true).truncate(true).open(&arena_path)?;
        file.set_len(alloc.size() as u64)?;
        let arena_map = if alloc.size() > 0 { Some(Arc::new(MmapOptions::new().map_raw(&file)?)) } else { None };
        Ok(ObjectStore {
            shm_dir,
            spill_dir,
            arena_path,
            arena_map,
            arena_file: Some(file),
            backed: BTreeMap::new(),
            reserve_pages: posix_fallocate,
            alloc,
            entries: HashMap::new(),
            tick: 0,
            num_spilled_total: 0,
        })
    }

    pub fn shm_dir(&self) -> &Path {
        &self.shm_dir
    }

    pub fn arena_path(&self) -> &Path {
        &self.arena_path
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Reserves room for a `size`-byte object: an arena range, or a file in the
    /// spill directory when it cannot fit. When idle objects could make room,
    /// and `may_spill`, it asks for them to be spilled first (`Reserved::SpillFirst`).
    pub fn reserve(&mut self, id: ObjectId, size: usize, may_spill: bool) -> std::io::Result<Reserved> {
        match self.entries.get(&id).filter(|e| !e.freed) {
            Some(old) if old.sealed => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("object {} already exists", id.hex()),
                ));
            }
            // A reservation left by an attempt that died (the task is being retried).
            Some(_) => self.discard_unsealed(&id),
            None => {}
        }
        let place = match self.place_in_arena(&id, size)? {
            Some(place) => place,
            None => {
                let jobs = if may_spill { self.pick_spills(size) } else { Vec::new() };
                if !jobs.is_empty() {
                    return Ok(Reserved::SpillFirst(jobs));
                }
                self.spill_file(&id)?
            }
        };
        let last_use = self.next_tick();
        let entry =
            Entry { size, place: place.clone(), sealed: false, freed: false, readers: 0, spilling: false, last_use };
        self.entries.insert(id, entry);
        Ok(Reserved::Placed(place))
    }

    /// An arena range, a spill file if the object can never fit or the arena's
    /// filesystem is full, or None when idle objects would have to make room.
    fn place_in_arena(&mut self, id: &ObjectId, size: usize) -> std::io::Result<Option<ObjectPlace>> {
        if size > self.alloc.size() {
            return self.spill_file(id).map(Some);
        }
        let Some(offset) = self.alloc.alloc(size) else { return Ok(None) };
        match self.back(offset, size) {
            Ok(()) => Ok(Some(ObjectPlace::Arena { offset, len: size })),
            // No pages left for the arena (its tmpfs is full): the object goes to disk.
            // Spilling others would not help, as their pages stay with the arena file.
            Err(e) => {
                tracing::warn!("the object store's shared memory is full ({e}); writing a {size}-byte object to disk");
                self.alloc.free(offset, size);
                self.spill_file(id).map(Some)
            }
        }
    }

    /// The least recently used sealed arena objects that nobody reads or spills,
    /// oldest first, until they add up to `size`; each is marked `spilling`.
    fn pick_spills(&mut self, size: usize) -> Vec<SpillJob> {
        let Some(arena) = self.arena_map.clone() else { return Vec::new() };
        let mut idle: Vec<(u64, ObjectId)> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.sealed && !e.freed && !e.spilling && e.readers == 0 && matches!(e.place, ObjectPlace::Arena { .. })
            })
            .map(|(id, e)| (e.last_use, *id))
            .collect();
        idle.sort_unstable();
        let mut jobs = Vec::new();
        let mut freed = 0;
        for (_, id) in idle {
            if freed >= size {
                break;
            }
            let to = self.spill_dir.join(file_name(&id));
            let entry = self.entries.get_mut(&id).expect("listed above");
            let ObjectPlace::Arena { offset, len } = entry.place else { continue };
            entry.spilling = true;
            freed += len;
            jobs.push(SpillJob { object_id: id, offset, len, to, arena: arena.clone() });
        }
        jobs
    }

    /// Takes the outcome of a `SpillJob`: the object now lives in its file and its
    /// range is free, unless it was freed or gained a reader meanwhile (then the
    /// file is dropped). Returns the spill, or the copy's error.
    pub fn finish_spill(&mut self, job: SpillJob, copied: std::io::Result<()>) -> std::io::Result<Option<SpillEvent>> {
        let id = job.object_id;
        let Some(entry) = self.entries.get_mut(&id).filter(|e| e.spilling) else {
            let _ = std::fs::remove_file(&job.to);
            return copied.map(|()| None);
        };
        entry.spilling = false;
        let keep_in_arena = copied.is_err() || entry.freed || entry.readers > 0;
        if keep_in_arena {
            let _ = std::fs::remove_file(&job.to);
            if entry.freed && entry.readers == 0 {
                let e = self.entries.remove(&id).expect("present");
                self.release(e);
            }
            return copied.map(|()| None);
        }
        entry.place = ObjectPlace::Spilled(job.to.clone());
        self.alloc.free(job.offset, job.len);
        self.num_spilled_total += 1;
        Ok(Some(SpillEvent { object_id: id, size: job.len, to: job.to }))
    }

    /// Gives the arena range `[offset, offset + len)` pages where it has none yet.
    fn back(&mut self, offset: usize, len: usize) -> std::io::Result<()> {
        if self.arena_file.is_none() {
            return Ok(());
        }
        let (start, end) = (offset, offset + crate::arena::round_up(len));
        let mut gaps = Vec::new();
        let mut at = start;
        let before = self.backed.range(..=start).next_back().map(|(s, e)| (*s, *e));
        for (s, e) in before.into_iter().chain(self.backed.range(start + 1..end).map(|(s, e)| (*s, *e))) {
            if e <= at {
                continue;
            }
            if s > at {
                gaps.push((at, s));
            }
            at = e;
            if at >= end {
                break;
            }
        }
        if at < end {
            gaps.push((at, end));
        }
        for (s, e) in gaps {
            let file = self.arena_file.as_ref().expect("checked above");
            (self.reserve_pages)(file, s, e - s)?;
            self.mark_backed(s, e);
        }
        Ok(())
    }

    fn mark_backed(&mut self, mut start: usize, mut end: usize) {
        let touching: Vec<(usize, usize)> =
            self.backed.range(..=end).rev().take_while(|(_, e)| **e >= start).map(|(s, e)| (*s, *e)).collect();
        for (s, e) in touching {
            self.backed.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.backed.insert(start, end);
    }

    fn spill_file(&self, id: &ObjectId) -> std::io::Result<ObjectPlace> {
        crate::create_private_dir_all(&self.spill_dir)?;
        Ok(ObjectPlace::Spilled(self.spill_dir.join(file_name(id))))
    }

    /// Marks a reserved object as fully written and readable.
    pub fn seal(&mut self, id: &ObjectId) -> bool {
        let tick = self.next_tick();
        match self.entries.get_mut(id).filter(|e| !e.freed) {
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
        self.free(&id);
        let entry = Entry {
            size,
            place: ObjectPlace::Inline(Arc::new(data)),
            sealed: true,
            freed: false,
            readers: 0,
            spilling: false,
            last_use,
        };
        self.entries.insert(id, entry);
    }

    pub fn contains_sealed(&self, id: &ObjectId) -> bool {
        self.entries.get(id).is_some_and(|e| e.sealed && !e.freed)
    }

    /// The sealed object's size, if this store holds it.
    pub fn sealed_size(&self, id: &ObjectId) -> Option<usize> {
        self.entries.get(id).filter(|e| e.sealed && !e.freed).map(|e| e.size)
    }

    /// The sealed object's place and size, marking it recently used.
    pub fn lookup(&mut self, id: &ObjectId) -> Option<(ObjectPlace, usize)> {
        let tick = self.next_tick();
        let e = self.entries.get_mut(id).filter(|e| e.sealed && !e.freed)?;
        e.last_use = tick;
        Some((e.place.clone(), e.size))
    }

    /// Writes part of a reserved, not yet sealed object (a copy arriving from another node).
    pub fn write_unsealed(&mut self, id: &ObjectId, offset: usize, data: &[u8]) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        let e = self
            .entries
            .get(id)
            .filter(|e| !e.sealed && !e.freed)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("object {} is not reserved", id.hex())))?;
        if offset + data.len() > e.size {
            return Err(Error::new(ErrorKind::InvalidInput, format!("write past the {}-byte object", e.size)));
        }
        match &e.place {
            ObjectPlace::Arena { offset: base, .. } => {
                let map = self.arena_map.as_ref().expect("arena objects imply an arena");
                // SAFETY: the range is reserved for this unsealed object, which only this writer fills.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), map.as_mut_ptr().add(base + offset), data.len())
                };
                Ok(())
            }
            ObjectPlace::Spilled(path) => {
                use std::os::unix::fs::FileExt;
                let file = crate::private_file_options().write(true).create(true).truncate(false).open(path)?;
                file.write_all_at(data, offset as u64)
            }
            ObjectPlace::Inline(_) => {
                Err(Error::new(ErrorKind::InvalidInput, "inline objects are not written in parts"))
            }
        }
    }

    /// The header flags of a sealed object held here (None when it is not, or its
    /// header cannot be read): what the writer said it is (a value, an error).
    pub fn flags(&self, id: &ObjectId) -> Option<u32> {
        let e = self.entries.get(id).filter(|e| e.sealed && !e.freed)?;
        match &e.place {
            ObjectPlace::Inline(data) => crate::layout::flags_of(data),
            ObjectPlace::Arena { offset, len } if *len >= 8 => match &self.arena_map {
                Some(map) if offset + 8 <= self.alloc.size() => {
                    // SAFETY: a sealed, unfreed entry's range stays allocated while the store's
                    // lock (our `&self`) is held; only its first 8 bytes are read.
                    let header = unsafe { std::slice::from_raw_parts(map.as_ptr().add(*offset), 8) };
                    crate::layout::flags_of(header)
                }
                _ => None,
            },
            ObjectPlace::Arena { .. } => None,
            ObjectPlace::Spilled(path) => {
                use std::io::Read;
                let mut header = [0u8; 8];
                File::open(path).and_then(|mut f| f.read_exact(&mut header)).ok()?;
                crate::layout::flags_of(&header)
            }
        }
    }

    /// A copy of `len` arena bytes at `offset` (the caller holds a reader on that range).
    pub fn read_arena(&self, offset: usize, len: usize) -> Vec<u8> {
        match &self.arena_map {
            // SAFETY: the range belongs to an object with a reader, so it is neither reused nor unmapped.
            Some(map) if offset + len <= self.alloc.size() => unsafe {
                std::slice::from_raw_parts(map.as_ptr().add(offset), len).to_vec()
            },
            _ => Vec::new(),
        }
    }

    /// Drops a reservation that was never sealed (its writer died or was superseded).
    pub fn discard_unsealed(&mut self, id: &ObjectId) {
        if self.entries.get(id).is_some_and(|e| !e.sealed && !e.freed) {
            let e = self.entries.remove(id).expect("present");
            self.release(e);
        }
    }

    /// A process now views the object's arena range.
    pub fn add_reader(&mut self, id: &ObjectId) {
        if let Some(e) = self.entries.get_mut(id) {
            e.readers += 1;
        }
    }

    /// A process dropped its view; a freed object's range is reusable once none remain.
    pub fn remove_reader(&mut self, id: &ObjectId) {
        let Some(e) = self.entries.get_mut(id) else { return };
        e.readers = e.readers.saturating_sub(1);
        if e.readers == 0 && e.freed && !e.spilling {
            let e = self.entries.remove(id).expect("present");
            self.release(e);
        }
    }

    /// Forgets the object. Its arena range is reused once no reader views it.
    pub fn free(&mut self, id: &ObjectId) -> bool {
        let Some(e) = self.entries.get_mut(id).filter(|e| !e.freed) else { return false };
        if (e.readers > 0 || e.spilling) && matches!(e.place, ObjectPlace::Arena { .. }) {
            e.freed = true;
            return true;
        }
        let e = self.entries.remove(id).expect("present");
        self.release(e);
        true
    }

    fn release(&mut self, e: Entry) {
        match e.place {
            ObjectPlace::Arena { offset, len } => self.alloc.free(offset, len),
            ObjectPlace::Spilled(path) => {
                let _ = std::fs::remove_file(path);
            }
            ObjectPlace::Inline(_) => {}
        }
    }

    /// Bytes the arena holds now (what `stats().shm_used` reports), without a walk of the entries.
    pub fn shm_used(&self) -> usize {
        self.alloc.used()
    }

    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats {
            capacity: self.alloc.size(),
            shm_used: self.alloc.used(),
            num_objects: self.entries.values().filter(|e| !e.freed).count(),
            num_spilled_total: self.num_spilled_total,
            ..Default::default()
        };
        for e in self.entries.values().filter(|e| !e.freed) {
            match e.place {
                ObjectPlace::Spilled(_) => stats.spilled_bytes += e.size,
                ObjectPlace::Inline(_) => stats.inline_bytes += e.size,
                ObjectPlace::Arena { .. } => {}
            }
        }
        stats
    }

    /// Removes every object, the arena and both directories.
    pub fn destroy(&mut self) {
        self.entries.clear();
        self.arena_map = None;
        self.arena_file = None;
        let _ = crate::remove_dir_if_exists(&self.shm_dir);
        let _ = crate::remove_dir_if_exists(&self.spill_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::ARENA_PAGE;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_array([n; 16])
    }

    /// A test store's directory, removed when the test ends.
    struct TestRoot(PathBuf);

    impl Drop for TestRoot {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for TestRoot {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn temp_store(capacity: usize) -> (ObjectStore, TestRoot) {
        let root = std::env::temp_dir().join(format!("oxray-store-test-{}", rand::random::<u64>()));
        let store = ObjectStore::new(root.join("shm"), root.join("spill"), capacity).unwrap();
        (store, TestRoot(root))
    }

    /// Reserves as the agent does: runs the spills asked for, then reserves again.
    fn reserve(store: &mut ObjectStore, n: ObjectId, size: usize) -> std::io::Result<(ObjectPlace, Vec<SpillEvent>)> {
        let mut events = Vec::new();
        loop {
            match store.reserve(n, size, true)? {
                Reserved::Placed(place) => return Ok((place, events)),
                Reserved::SpillFirst(jobs) => {
                    for job in jobs {
                        let copied = job.run();
                        events.extend(store.finish_spill(job, copied)?);
                    }
                }
            }
        }
    }

    /// Writes `n` repeated into the object's place, as a client would.
    fn write_and_seal(store: &mut ObjectStore, n: u8, size: usize) -> ObjectPlace {
        let (place, _) = reserve(store, id(n), size).unwrap();
        match &place {
            ObjectPlace::Arena { offset, len } => {
                let map = crate::map_arena(store.arena_path()).unwrap();
                // SAFETY: the range was just reserved for this object.
                unsafe { std::ptr::write_bytes(map.as_mut_ptr().add(*offset), n, *len) };
            }
            ObjectPlace::Spilled(p) => std::fs::write(p, vec![n; size]).unwrap(),
            ObjectPlace::Inline(_) => unreachable!(),
        }
        assert!(store.seal(&id(n)));
        place
    }

    fn allocated_bytes(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn a_reserved_arena_range_has_its_pages_before_anyone_writes() {
        let (mut store, _root) = temp_store(64 * ARENA_PAGE);
        assert_eq!(allocated_bytes(store.arena_path()), 0, "the arena starts sparse");
        let (place, _) = reserve(&mut store, id(1), 10 * ARENA_PAGE).unwrap();
        assert!(matches!(place, ObjectPlace::Arena { .. }));
        assert!(allocated_bytes(store.arena_path()) >= 10 * ARENA_PAGE as u64, "reserve backs the range");
        store.destroy();
    }

    static PAGE_CALLS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

    fn counting_fallocate(file: &File, offset: usize, len: usize) -> std::io::Result<()> {
        PAGE_CALLS.lock().unwrap().push((offset, len));
        posix_fallocate(file, offset, len)
    }

    #[test]
    fn pages_are_reserved_once_per_range() {
        let (mut store, _root) = temp_store(64 * ARENA_PAGE);
        store.reserve_pages = counting_fallocate;
        write_and_seal(&mut store, 1, 8 * ARENA_PAGE);
        store.free(&id(1));
        write_and_seal(&mut store, 2, 8 * ARENA_PAGE); // the same range again
        write_and_seal(&mut store, 3, 4 * ARENA_PAGE);
        store.free(&id(2));
        write_and_seal(&mut store, 4, 12 * ARENA_PAGE); // partly over backed pages
        let calls = PAGE_CALLS.lock().unwrap().clone();
        let total: usize = calls.iter().map(|(_, len)| len).sum();
        assert_eq!(total, 24 * ARENA_PAGE, "every page backed exactly once: {calls:?}");
        assert_eq!(store.backed.len(), 1, "adjacent ranges merge: {:?}", store.backed);
        store.destroy();
    }

    fn tmpfs_full(_: &File, _: usize, _: usize) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
    }

    #[test]
    fn a_full_shared_memory_filesystem_sends_new_objects_to_disk() {
        let (mut store, root) = temp_store(64 * ARENA_PAGE);
        store.reserve_pages = tmpfs_full;
        let (place, spills) = reserve(&mut store, id(5), 4 * ARENA_PAGE).unwrap();
        assert!(spills.is_empty());
        let ObjectPlace::Spilled(path) = place else { panic!("expected a spill file, got {place:?}") };
        assert!(path.starts_with(root.join("spill")));
        assert_eq!(store.stats().shm_used, 0, "the arena range was given back");
        store.destroy();
    }

    #[test]
    fn spilling_happens_outside_and_a_reader_or_a_free_meanwhile_wins() {
        let (mut store, _root) = temp_store(8 * ARENA_PAGE);
        write_and_seal(&mut store, 1, 4 * ARENA_PAGE);
        write_and_seal(&mut store, 2, 4 * ARENA_PAGE);
        let Reserved::SpillFirst(jobs) = store.reserve(id(3), 4 * ARENA_PAGE, true).unwrap() else {
            panic!("a full arena asks for a spill")
        };
        assert_eq!(jobs.iter().map(|j| j.object_id).collect::<Vec<_>>(), [id(1)], "the oldest, just enough");
        // While it is copied the object is still read from the arena, and not picked twice.
        assert!(matches!(store.lookup(&id(1)), Some((ObjectPlace::Arena { .. }, _))));
        let Reserved::SpillFirst(more) = store.reserve(id(4), 4 * ARENA_PAGE, true).unwrap() else { panic!() };
        assert_eq!(more.iter().map(|j| j.object_id).collect::<Vec<_>>(), [id(2)]);
        // Object 1 gains a reader during its copy: it stays in the arena, the file is dropped.
        store.add_reader(&id(1));
        let job = jobs.into_iter().next().unwrap();
        let to = job.to.clone();
        let copied = job.run();
        assert_eq!(store.finish_spill(job, copied).unwrap(), None);
        assert!(!to.exists());
        assert!(matches!(store.lookup(&id(1)), Some((ObjectPlace::Arena { .. }, _))));
        // Object 2 is freed during its copy: its range waits for the copy, then is released.
        assert!(store.free(&id(2)));
        assert_eq!(store.stats().shm_used, 8 * ARENA_PAGE, "the copy still reads the range");
        let job = more.into_iter().next().unwrap();
        let copied = job.run();
        assert_eq!(store.finish_spill(job, copied).unwrap(), None);
        assert_eq!(store.stats().shm_used, 4 * ARENA_PAGE);
        store.destroy();
    }

    #[test]
    fn without_spilling_a_full_arena_sends_the_object_to_disk() {
        let (mut store, _root) = temp_store(4 * ARENA_PAGE);
        write_and_seal(&mut store, 1, 4 * ARENA_PAGE);
        let Reserved::Placed(place) = store.reserve(id(2), ARENA_PAGE, false).unwrap() else { panic!() };
        assert!(matches!(place, ObjectPlace::Spilled(_)));
        store.destroy();
    }

    #[test]
    fn spills_least_recently_used_when_full() {
        let (mut store, root) = temp_store(10 * ARENA_PAGE);
        write_and_seal(&mut store, 1, 4 * ARENA_PAGE);
        write_and_seal(&mut store, 2, 4 * ARENA_PAGE);
        store.lookup(&id(1)); // 2 is now the least recently used
        let (place, spills) = reserve(&mut store, id(3), 4 * ARENA_PAGE).unwrap();
        assert!(matches!(place, ObjectPlace::Arena { .. }));
        assert_eq!(spills.len(), 1);
        assert_eq!(spills[0].object_id, id(2));
        let (place, size) = store.lookup(&id(2)).unwrap();
        assert_eq!(size, 4 * ARENA_PAGE);
        let ObjectPlace::Spilled(p) = place else { panic!("expected spilled, got {place:?}") };
        assert_eq!(std::fs::read(p).unwrap(), vec![2u8; 4 * ARENA_PAGE], "spilled bytes are the object's");
        assert_eq!(store.stats().spilled_bytes, 4 * ARENA_PAGE);
        store.destroy();
        assert!(!root.join("shm").exists());
    }

    #[test]
    fn objects_being_read_are_not_spilled_and_their_range_waits_for_readers() {
        let (mut store, _root) = temp_store(8 * ARENA_PAGE);
        let first = write_and_seal(&mut store, 1, 8 * ARENA_PAGE);
        store.add_reader(&id(1));
        // Full, and the only object is being read: the new one goes to disk.
        let (place, spills) = reserve(&mut store, id(2), 4 * ARENA_PAGE).unwrap();
        assert!(spills.is_empty());
        assert!(matches!(place, ObjectPlace::Spilled(_)));
        // Freed while read: the range stays allocated until the reader lets go.
        assert!(store.free(&id(1)));
        assert!(store.lookup(&id(1)).is_none());
        assert_eq!(store.stats().shm_used, 8 * ARENA_PAGE);
        store.remove_reader(&id(1));
        assert_eq!(store.stats().shm_used, 0);
        let (again, _) = reserve(&mut store, id(3), 8 * ARENA_PAGE).unwrap();
        assert_eq!(again, first, "the released range is reused");
        store.destroy();
    }

    #[test]
    fn object_larger_than_capacity_goes_to_disk() {
        let (mut store, root) = temp_store(2 * ARENA_PAGE);
        let (place, spills) = reserve(&mut store, id(9), 50 * ARENA_PAGE).unwrap();
        assert!(spills.is_empty());
        let ObjectPlace::Spilled(p) = place else { panic!("expected a spill file") };
        assert!(p.starts_with(root.join("spill")));
        store.destroy();
    }

    #[test]
    fn unsealed_objects_are_invisible_and_never_spilled() {
        let (mut store, _root) = temp_store(8 * ARENA_PAGE);
        reserve(&mut store, id(2), 6 * ARENA_PAGE).unwrap();
        assert!(store.lookup(&id(2)).is_none());
        let (place, spills) = reserve(&mut store, id(3), 6 * ARENA_PAGE).unwrap();
        assert!(spills.is_empty(), "an unsealed object must not be spilled");
        assert!(matches!(place, ObjectPlace::Spilled(_)));
        store.destroy();
    }

    #[test]
    fn inline_objects_are_looked_up_in_memory() {
        let (mut store, _root) = temp_store(ARENA_PAGE);
        store.insert_inline(id(4), vec![1, 2, 3]);
        assert!(store.contains_sealed(&id(4)));
        assert_eq!(store.lookup(&id(4)).unwrap().0, ObjectPlace::Inline(Arc::new(vec![1, 2, 3])));
        assert_eq!(store.stats().inline_bytes, 3);
        assert!(store.free(&id(4)));
        assert!(!store.contains_sealed(&id(4)));
        store.destroy();
    }
}
