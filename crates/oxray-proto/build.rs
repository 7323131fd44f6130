fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/oxray.proto");
    // protox compiles the protos in-process, so no system `protoc` is needed.
    let descriptors = protox::compile(["proto/oxray.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
