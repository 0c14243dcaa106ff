//! The wire contract of instance-ha: generated protobuf messages, tonic
//! clients and servers, and the encoded descriptor set for server reflection.
//!
//! Only the gRPC edges of the services (`api-service/src/grpc`, the engine
//! link on both sides and the CLI) use these types; everything else works on
//! plain Rust domain types.

/// The public API: segments, hosts, notifications and vmoves.
#[allow(clippy::large_enum_variant)]
pub mod v1 {
    tonic::include_proto!("instanceha.v1");
}

/// The dispatch stream between `instanceha-api` and `instanceha-engine`.
pub mod engine {
    #[allow(clippy::large_enum_variant)]
    pub mod v1 {
        tonic::include_proto!("instanceha.engine.v1");
    }
}

pub mod incoming;
pub mod shutdown;
pub mod tls;

/// Encoded `FileDescriptorSet` of every instance-ha proto file (with its
/// imports), for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/instanceha_descriptor.bin"));
