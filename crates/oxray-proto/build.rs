//! Compiles the control-plane protos with protox (in-process: no system `protoc`).

const PROTOS: &[&str] = &[
    "proto/oxray/v1/common.proto",
    "proto/oxray/v1/driver.proto",
    "proto/oxray/v1/worker.proto",
    "proto/oxray/v1/peer.proto",
    "proto/oxray/v1/head.proto",
    "proto/oxray/v1/job.proto",
    "proto/oxray/v1/state.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
