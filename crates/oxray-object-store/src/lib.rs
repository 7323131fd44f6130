//! The node's object store: the byte layout of a serialized object, shared-memory
//! files that hold large objects, and capacity accounting with spilling to disk.

mod arena;
mod layout;
mod private;
mod process;
mod shm;
mod store;

pub use arena::{ARENA_PAGE, ArenaAllocator};
pub use layout::{LAYOUT_ALIGN, Layout, LayoutError, ParsedObject, parse, plan, write_object};
pub use private::{create_private_dir_all, private_file_options, write_private_file};
pub use process::process_start_ticks;
pub use shm::{MappedObject, ShmError, create_object_file, map_arena, map_object_file, remove_dir_if_exists};
pub use store::{ObjectPlace, ObjectStore, Reserved, SpillEvent, SpillJob, StoreStats};

/// Objects up to this size travel inline in RPCs instead of through shared memory.
pub const INLINE_THRESHOLD: usize = 100 * 1024;

pub use oxray_ids::ObjectId;
