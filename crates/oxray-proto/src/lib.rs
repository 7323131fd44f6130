//! Messages and gRPC services of the oxray control plane (package `oxray.v1`),
//! generated at build time from `proto/oxray/v1/*.proto`.

/// The `oxray.v1` package: one service per kind of caller. Generated code is
/// exempt from the workspace lints (it is not ours to change).
#[allow(clippy::all, clippy::pedantic, unreachable_pub, unused_qualifications, missing_docs)]
pub mod v1 {
    tonic::include_proto!("oxray.v1");
}

pub use v1::*;
