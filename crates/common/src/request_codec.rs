//! The codec of the generated servers (clients keep tonic's own): prost, except that a request
//! that does not decode is the client's error, `INVALID_ARGUMENT` naming the field, where tonic
//! answers `INTERNAL`. The usual case is a `string` field whose bytes are not UTF-8; prost's
//! error names a oneof (`SubmitRequest.spec`) rather than its field, so the field is found in
//! the request's bytes with the contract's descriptors.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::LazyLock;

use prost::bytes::Buf;
use prost::{Message, Name};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// Prost, with requests that do not decode refused as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct RequestCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for RequestCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for RequestCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Name + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// Decodes a request of type `U`.
#[derive(Debug, Clone)]
pub struct RequestDecoder<U>(PhantomData<U>);

impl<U: Message + Name + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // Taken whole (no copy), so that a failure can be looked into.
        let bytes = buf.copy_to_bytes(buf.remaining());
        U::decode(bytes.clone())
            .map(Some)
            .map_err(|e| refused(&U::full_name(), &bytes, &e))
    }
}

/// `INVALID_ARGUMENT` for a request of `message` (`lanes.v1.SubmitRequest`) that does not
/// decode: the field whose text is not UTF-8, or else prost's reason.
fn refused(message: &str, bytes: &[u8], e: &prost::DecodeError) -> Status {
    let short = message.rsplit('.').next().unwrap_or(message);
    let why = match MESSAGES
        .get(&format!(".{message}"))
        .and_then(|d| not_utf8(d, bytes))
    {
        Some(field) => format!("{field} is not valid UTF-8 text"),
        None => e.to_string(),
    };
    Status::invalid_argument(format!("invalid {short}: {why}"))
}

/// The contract's messages by full name (`.lanes.v1.TaskSpec`, nested ones included).
static MESSAGES: LazyLock<HashMap<String, &'static DescriptorProto>> = LazyLock::new(|| {
    fn add(
        out: &mut HashMap<String, &'static DescriptorProto>,
        prefix: &str,
        m: &'static DescriptorProto,
    ) {
        let name = format!("{prefix}.{}", m.name());
        for nested in &m.nested_type {
            add(out, &name, nested);
        }
        out.insert(name, m);
    }
    static FILES: LazyLock<FileDescriptorSet> = LazyLock::new(|| {
        FileDescriptorSet::decode(crate::proto::FILE_DESCRIPTOR_SET)
            .expect("the compiled descriptor set decodes")
    });
    let mut out = HashMap::new();
    for f in &FILES.file {
        for m in &f.message_type {
            add(&mut out, &format!(".{}", f.package()), m);
        }
    }
    out
});

/// The path (`tasks[3].payload_json`, `header.spec_json`) of the first `string` field of a
/// message of type `desc` whose bytes are not UTF-8; `None` when there is none or the bytes
/// do not parse as protobuf.
fn not_utf8(desc: &DescriptorProto, mut bytes: &[u8]) -> Option<String> {
    let mut seen: HashMap<i32, usize> = HashMap::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let (number, wire_type) = (i32::try_from(key >> 3).ok()?, key & 7);
        let value = match wire_type {
            0 => {
                varint(&mut bytes)?;
                continue;
            }
            1 | 5 => {
                let n = if wire_type == 1 { 8 } else { 4 };
                bytes = bytes.get(n..)?;
                continue;
            }
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).ok()?;
                let value = bytes.get(..len)?;
                bytes = &bytes[len..];
                value
            }
            // Groups are not in this contract.
            _ => return None,
        };
        let Some(field) = desc.field.iter().find(|f| f.number() == number) else {
            continue;
        };
        let name = if field.label() == Label::Repeated {
            let index = seen.entry(number).or_default();
            *index += 1;
            format!("{}[{}]", field.name(), *index - 1)
        } else {
            field.name().to_owned()
        };
        match field.r#type() {
            Type::String if std::str::from_utf8(value).is_err() => return Some(name),
            Type::Message => {
                if let Some(inner) = MESSAGES
                    .get(field.type_name())
                    .and_then(|d| not_utf8(d, value))
                {
                    return Some(format!("{name}.{inner}"));
                }
            }
            _ => {}
        }
    }
    None
}

/// A protobuf varint, taken off the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let b = *bytes.get(i)?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto as pb;

    /// `s` encoded, then its bytes `good` (which must occur once) replaced by `bad`.
    fn broken(m: &impl Message, good: &[u8], bad: &[u8]) -> Vec<u8> {
        let mut bytes = m.encode_to_vec();
        let at = bytes
            .windows(good.len())
            .position(|w| w == good)
            .expect("the marker is in the message");
        bytes.splice(at..at + good.len(), bad.iter().copied());
        bytes
    }

    fn refusal<U: Message + Name + Default>(bytes: &[u8]) -> Status {
        let Err(e) = U::decode(bytes) else {
            panic!("the bytes decode")
        };
        refused(&U::full_name(), bytes, &e)
    }

    #[test]
    fn text_that_is_not_utf8_is_named_by_its_field() {
        let request = pb::SubmitRequest {
            spec: Some(pb::submit_request::Spec::CampaignToml("id = \"XY\"".into())),
            tasks: vec![
                pb::TaskSpec {
                    id: "t0".into(),
                    ..Default::default()
                },
                pb::TaskSpec {
                    id: "t1".into(),
                    tags: vec!["a".into(), "QR".into()],
                    payload_json: "{\"k\": \"AB\"}".into(),
                    ..Default::default()
                },
            ],
        };
        // Same length, so the lengths before them stay right.
        for (good, field) in [
            (&b"XY"[..], "campaign_toml"),
            (b"AB", "tasks[1].payload_json"),
            (b"QR", "tasks[1].tags[1]"),
        ] {
            let s = refusal::<pb::SubmitRequest>(&broken(&request, good, b"\xff\xfe"));
            assert_eq!(s.code(), tonic::Code::InvalidArgument);
            assert_eq!(
                s.message(),
                format!("invalid SubmitRequest: {field} is not valid UTF-8 text")
            );
        }
        let chunk = pb::SubmitChunk {
            chunk: Some(pb::submit_chunk::Chunk::Header(request)),
        };
        let s = refusal::<pb::SubmitChunk>(&broken(&chunk, b"AB", b"\xff\xfe"));
        assert_eq!(
            s.message(),
            "invalid SubmitChunk: header.tasks[1].payload_json is not valid UTF-8 text"
        );
    }

    #[test]
    fn other_broken_requests_keep_prost_s_reason() {
        let s = refusal::<pb::SubmitRequest>(&[0x0a, 0x05, b'a']);
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(
            s.message()
                .starts_with("invalid SubmitRequest: failed to decode"),
            "{}",
            s.message()
        );
    }
}
