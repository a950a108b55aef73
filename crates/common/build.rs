//! Compiles the wire contract with a vendored protoc, so the build needs no system package.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let protos =
        ["types.proto", "campaign.proto", "lane.proto"].map(|p| root.join("lanes/v1").join(p));
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(
        config,
        &protos,
        std::slice::from_ref(&root),
    )?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
