//! Compiles the wire contract with a vendored protoc, so the build needs no system package.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not with `env!`: a build script binary shared by several checkouts
    // (one target directory) must compile the proto files of the checkout being built.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let protos =
        ["types.proto", "campaign.proto", "lane.proto"].map(|p| root.join("lanes/v1").join(p));
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // The descriptors server reflection serves, so grpcurl needs no proto files.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    config.file_descriptor_set_path(out.join("lanes_descriptor.bin"));
    tonic_prost_build::configure().compile_with_config(
        config,
        &protos,
        std::slice::from_ref(&root),
    )?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
