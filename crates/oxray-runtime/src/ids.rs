//! Ids of objects, tasks, actors, workers and nodes: 16 random bytes.

pub type Id = [u8; 16];

pub fn id_from_bytes(raw: &[u8]) -> Result<Id, String> {
    raw.try_into().map_err(|_| format!("expected a 16-byte id, got {} bytes", raw.len()))
}

pub fn new_id() -> Id {
    rand::random()
}
