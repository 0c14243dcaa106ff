//! Compiles the `.proto` files with protox (no system `protoc`) and generates
//! the prost messages and tonic clients and servers.

use std::path::PathBuf;

use prost::Message;

const PROTOS: &[&str] = &[
    "instanceha/v1/common.proto",
    "instanceha/v1/segments.proto",
    "instanceha/v1/hosts.proto",
    "instanceha/v1/notifications.proto",
    "instanceha/v1/vmoves.proto",
    "instanceha/engine/v1/engine.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    println!("cargo:rerun-if-changed={}", root.display());

    let fds = protox::Compiler::new([&root])?
        .include_imports(true)
        .include_source_info(true)
        .open_files(PROTOS)?
        .file_descriptor_set();

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    // One descriptor set per server, so that each one's reflection lists
    // only the services it serves.
    for (name, files) in [
        (
            "instanceha_public_descriptor.bin",
            &PROTOS[..PROTOS.len() - 1],
        ),
        (
            "instanceha_engine_descriptor.bin",
            &PROTOS[PROTOS.len() - 1..],
        ),
    ] {
        let set = protox::Compiler::new([&root])?
            .include_imports(true)
            .include_source_info(true)
            .open_files(files)?
            .file_descriptor_set();
        std::fs::write(out_dir.join(name), set.encode_to_vec())?;
    }

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
