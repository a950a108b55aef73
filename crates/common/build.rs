//! Compiles the wire contract with a vendored protoc, so the build needs no system package.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not with `env!`: a build script binary shared by several checkouts
    // (one target directory) must compile the proto files of the checkout being built.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let protos =
        ["types.proto", "campaign.proto", "lane.proto"].map(|p| root.join("lanes/v1").join(p));
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);

    // The messages and the clients, with tonic's prost codec.
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(&protoc);
    // The descriptors server reflection serves, so grpcurl needs no proto files.
    config.file_descriptor_set_path(out.join("lanes_descriptor.bin"));
    // `prost::Name`: the servers' codec looks a request's fields up by its type's name.
    config.enable_type_names();
    tonic_prost_build::configure()
        .build_server(false)
        .compile_with_config(config, &protos, std::slice::from_ref(&root))?;

    // The servers, over the same messages, with a codec that answers a request that does not
    // decode with INVALID_ARGUMENT naming the field (`crate::request_codec`).
    let servers = out.join("servers");
    std::fs::create_dir_all(&servers)?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(&protoc);
    tonic_prost_build::configure()
        .build_client(false)
        .out_dir(&servers)
        .extern_path(".lanes.v1", "crate::proto::v1")
        .codec_path("crate::request_codec::RequestCodec")
        .compile_with_config(config, &protos, std::slice::from_ref(&root))?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
