//! The contract of instance-ha: the generated protobuf messages and tonic
//! clients and servers, the encoded descriptor sets for server reflection,
//! timestamps converted in one place ([`time`]) and the error every edge
//! reports for a message it cannot read ([`ConversionError`]); and the
//! plain Rust types the API, the engine and the CLI share, each with its
//! one conversion to the wire: the model's enums ([`model`]) and the run
//! protocol ([`run`]).
//!
//! Only the edges of the services (the API's `grpc` module and its engine
//! link, the engine's `link`, the CLI's client and conversions) use the
//! generated types; everything else works on plain Rust types.

pub mod model;
pub mod run;
pub mod time;

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

/// A message an edge cannot turn into its domain type (restate's shape:
/// a missing field, an enum value this version does not know, or a value
/// that is not valid), naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("{0} is required")]
    MissingField(&'static str),
    #[error("{field} has the unknown value {value}")]
    UnexpectedEnumVariant { field: &'static str, value: i32 },
    #[error("{field}: {reason}")]
    InvalidData { field: &'static str, reason: String },
}

/// Encoded `FileDescriptorSet` of the public API's proto files (with their
/// imports), for the API's server reflection.
pub const PUBLIC_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/instanceha_public_descriptor.bin"
));

/// Encoded `FileDescriptorSet` of the engine's proto file (with its
/// imports), for the engine's server reflection.
pub const ENGINE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/instanceha_engine_descriptor.bin"
));
