//! Serve's state in the head: the controller's last report of its applications
//! (Ray's `ServeInstanceDetails`, what the REST API's GET answers, in memory) and
//! the controller's checkpoint (opaque bytes: its applications, their code and
//! settings, its HTTP options), written through to redb when the head has a state
//! directory, so that a controller started after a head restart takes the
//! applications back.

use super::store::{HeadStore, StoreError};
use parking_lot::Mutex;
use std::sync::Arc;

pub struct ServeState {
    details: Mutex<Option<serde_json::Value>>,
    checkpoint: Mutex<Option<Arc<Vec<u8>>>>,
    store: Option<Arc<HeadStore>>,
    /// Checkpoints are written one at a time, in the order they came (a commit is an fsync,
    /// never run under `checkpoint`'s lock).
    writing: tokio::sync::Mutex<()>,
}

impl ServeState {
    /// The checkpoint a previous head kept comes back from `store`.
    pub fn new(store: Option<Arc<HeadStore>>) -> Result<Self, StoreError> {
        let checkpoint = match &store {
            Some(store) => store.serve_checkpoint()?.map(Arc::new),
            None => None,
        };
        Ok(ServeState {
            details: Mutex::new(None),
            checkpoint: Mutex::new(checkpoint),
            store,
            writing: tokio::sync::Mutex::new(()),
        })
    }

    /// The applications as the controller last reported them; None when Serve is not running.
    pub fn details(&self) -> Option<serde_json::Value> {
        self.details.lock().clone()
    }

    /// Keeps the controller's report (`""`: Serve shut down); the error names what is wrong.
    pub fn record_details(&self, details_json: &str) -> Result<(), String> {
        let details = if details_json.is_empty() {
            None
        } else {
            Some(serde_json::from_str(details_json).map_err(|e| format!("Serve's details are not JSON: {e}"))?)
        };
        *self.details.lock() = details;
        Ok(())
    }

    /// The controller's checkpoint; None when Serve is not running (or never kept one).
    pub fn checkpoint(&self) -> Option<Arc<Vec<u8>>> {
        self.checkpoint.lock().clone()
    }

    /// Keeps the controller's checkpoint (empty drops it), written through to redb first.
    pub async fn save_checkpoint(&self, checkpoint: Vec<u8>) -> Result<(), StoreError> {
        let _one_at_a_time = self.writing.lock().await;
        let checkpoint = (!checkpoint.is_empty()).then(|| Arc::new(checkpoint));
        if let Some(store) = self.store.clone() {
            let written = checkpoint.clone();
            let write = move || store.put_serve_checkpoint(written.as_deref().map(Vec::as_slice));
            match tokio::task::spawn_blocking(write).await {
                Ok(result) => result?,
                Err(e) => return Err(StoreError::Unfinished(e.to_string())),
            }
        }
        *self.checkpoint.lock() = checkpoint;
        Ok(())
    }
}
