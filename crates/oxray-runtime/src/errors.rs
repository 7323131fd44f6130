//! Errors the runtime itself stores in place of a task's result. Python turns
//! them into the matching `oxray.exceptions` class when the object is read.

use oxray_object_store::{plan, write_object};

/// Object flags: what the pickle section of an object holds.
pub const FLAG_VALUE: u32 = 0;
/// A pickled exception raised by the user's code.
pub const FLAG_APPLICATION_ERROR: u32 = 1;
/// A JSON `{"type", "message"}` written by the runtime.
pub const FLAG_SYSTEM_ERROR: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemErrorKind {
    WorkerCrashed,
    ActorDied,
    /// The actor's process died and it is restarting: a call that ran there failed.
    ActorUnavailable,
    ActorUnschedulable,
    TaskUnschedulable,
    TaskCancelled,
    ObjectLost,
    /// The worker that submitted the task (and so owned its result) died first.
    OwnerDied,
    System,
}

impl SystemErrorKind {
    /// The exception class name in `oxray.exceptions` (Ray's names).
    pub fn class_name(self) -> &'static str {
        match self {
            SystemErrorKind::WorkerCrashed => "WorkerCrashedError",
            SystemErrorKind::ActorDied => "ActorDiedError",
            SystemErrorKind::ActorUnavailable => "ActorUnavailableError",
            SystemErrorKind::ActorUnschedulable => "ActorUnschedulableError",
            SystemErrorKind::TaskUnschedulable => "TaskUnschedulableError",
            SystemErrorKind::TaskCancelled => "TaskCancelledError",
            SystemErrorKind::ObjectLost => "ObjectLostError",
            SystemErrorKind::OwnerDied => "OwnerDiedError",
            SystemErrorKind::System => "RaySystemError",
        }
    }
}

/// A serialized object that raises `kind` with `message` when read.
pub fn system_error_object(kind: SystemErrorKind, message: &str) -> Vec<u8> {
    let body = serde_json::json!({ "type": kind.class_name(), "message": message }).to_string();
    let layout = plan(body.len(), &[]);
    let mut out = vec![0u8; layout.total_size];
    write_object(&mut out, &layout, FLAG_SYSTEM_ERROR, body.as_bytes(), &[]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_error_round_trips_as_json() {
        let blob = system_error_object(SystemErrorKind::ActorDied, "the actor \"A\" died");
        let parsed = oxray_object_store::parse(&blob).unwrap();
        assert_eq!(parsed.flags, FLAG_SYSTEM_ERROR);
        let json: serde_json::Value = serde_json::from_slice(&blob[parsed.pickle]).unwrap();
        assert_eq!(json["type"], "ActorDiedError");
        assert_eq!(json["message"], "the actor \"A\" died");
    }
}
