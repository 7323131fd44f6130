//! Messages and gRPC services of the oxray control plane, generated at build time.
#![allow(clippy::all, clippy::pedantic)]

tonic::include_proto!("oxray");
