//! `submit_spec_json`: the coordinator's Submit and SubmitStream conversion
//! (`Campaign::try_from(SubmitRequest)`, `SubmitAssembly`) on a request built from the input.
//!
//! The input is NUL-separated: the spec text first, sent both as `spec_json` and as
//! `campaign_toml`, then one part per task with its fields on lines: `id`, `payload_json`,
//! `group`, tags (tab-separated), `timeout_s`, `max_turns`, `max_cost_usd` (a field that does
//! not parse as a number is left unset). A submission must never panic; one and the same
//! request must get one answer in one message or streamed; a refusal names at least one
//! field; and an accepted campaign passes the rules again and submits again unchanged.

use lanes_common::proto as pb;
use lanes_common::spec::{self, Campaign};
use lanes_common::submit::SubmitAssembly;

pub fn fuzz_one(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let spec_text = parts.next().unwrap_or_default();
    let tasks: Vec<pb::TaskSpec> = parts.map(task).collect();
    for spec in [
        pb::submit_request::Spec::SpecJson(spec_text.to_owned()),
        pb::submit_request::Spec::CampaignToml(spec_text.to_owned()),
    ] {
        let request = pb::SubmitRequest {
            spec: Some(spec),
            tasks: tasks.clone(),
        };
        let direct = Campaign::try_from(request.clone());
        assert_eq!(
            direct,
            streamed(&request, usize::MAX),
            "one submission, two answers"
        );
        // A stream over its byte limit is refused, never a panic.
        let _ = streamed(&request, data.len() / 2);
        match direct {
            Ok(c) => {
                c.spec.validate().expect("an accepted spec validates");
                spec::validate_tasks(&c.tasks).expect("accepted tasks validate");
                super::submits_unchanged(&c);
            }
            Err(e) => assert!(!e.violations.is_empty(), "a refusal without a reason"),
        }
    }
}

/// The request as a SubmitStream: the header with its spec alone, then the tasks two a chunk.
fn streamed(
    request: &pb::SubmitRequest,
    max_bytes: usize,
) -> Result<Campaign, lanes_common::submit::SubmitInvalid> {
    let mut assembly = SubmitAssembly::new(max_bytes);
    let header = pb::SubmitRequest {
        spec: request.spec.clone(),
        tasks: Vec::new(),
    };
    assembly.push(pb::SubmitChunk {
        chunk: Some(pb::submit_chunk::Chunk::Header(header)),
    })?;
    for tasks in request.tasks.chunks(2) {
        assembly.push(pb::SubmitChunk {
            chunk: Some(pb::submit_chunk::Chunk::Tasks(pb::TaskChunk {
                tasks: tasks.to_vec(),
            })),
        })?;
    }
    assembly.finish()
}

fn task(part: &str) -> pb::TaskSpec {
    let mut lines = part.split('\n');
    let mut next = || lines.next().unwrap_or_default();
    let id = next().to_owned();
    let payload_json = next().to_owned();
    let group = next().to_owned();
    let tags = match next() {
        "" => Vec::new(),
        tags => tags.split('\t').map(str::to_owned).collect(),
    };
    let timeout_s = next().parse().ok();
    let max_turns = next().parse().ok();
    let max_cost_usd = next().parse().ok();
    pb::TaskSpec {
        id,
        group,
        tags,
        timeout_s,
        max_turns,
        max_cost_usd,
        payload_json,
    }
}
