//! The crate's one wall clock: milliseconds since the epoch, read by the
//! service layers and handed to the state machines, which never read it themselves.
//! It is `oxray-rest`'s, the engine's one wall clock, re-exported so callers here name `clock::now_ms`.

pub use oxray_rest::clock::now_ms;
