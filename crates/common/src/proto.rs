//! The generated wire contract (`proto/lanes/v1`). Conversions to and from the domain types
//! live in [`crate::convert`], and nowhere else.

#[allow(unreachable_pub, clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("lanes.v1");
    // The servers, built apart with `crate::request_codec` (see build.rs).
    include!(concat!(env!("OUT_DIR"), "/servers/lanes.v1.rs"));
}

pub use v1::*;

/// The encoded `FileDescriptorSet` of `proto/lanes/v1`, comments included, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/lanes_descriptor.bin"));
