//! The Retry rpc's request: an operator's retry pass over a campaign's excluded trials,
//! checked before the store is asked (the note is recorded in the ledger, so it is required
//! and bounded).

use tonic::Status;

use lanes_common::ids::CampaignId;
use lanes_common::proto as pb;

use super::campaign::campaign_id;
use crate::grpc_status::bad_field;
use crate::store::RequeueRequest;

/// The longest note a retry pass records.
const MAX_NOTE_BYTES: usize = 1024;
/// The longest reason glob of a retry pass.
const MAX_REASON_GLOB_BYTES: usize = 256;

/// The campaign and the pass a retry request asks for, or which field is wrong.
pub(super) fn pass_of(req: pb::RetryRequest) -> Result<(CampaignId, RequeueRequest), Status> {
    let id = campaign_id("id", &req.id)?;
    if !req.excluded {
        return Err(bad_field(
            "excluded",
            "a retry pass requeues excluded trials: set excluded",
        ));
    }
    let note = req.note.trim();
    if note.is_empty() {
        return Err(bad_field(
            "note",
            "say why: the note is recorded in the ledger",
        ));
    }
    if note.len() > MAX_NOTE_BYTES {
        return Err(bad_field(
            "note",
            format!("{} bytes, over the limit of {MAX_NOTE_BYTES}", note.len()),
        ));
    }
    if req.reason.len() > MAX_REASON_GLOB_BYTES {
        return Err(bad_field(
            "reason",
            format!(
                "{} bytes, over the limit of {MAX_REASON_GLOB_BYTES}",
                req.reason.len()
            ),
        ));
    }
    let note = note.to_owned();
    Ok((
        id,
        RequeueRequest {
            reason: (!req.reason.is_empty()).then_some(req.reason),
            note,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(note: &str, reason: &str) -> pb::RetryRequest {
        pb::RetryRequest {
            id: "c1".into(),
            excluded: true,
            note: note.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_pass_needs_excluded_a_note_and_bounded_fields() {
        let (id, pass) = pass_of(req("  flaky VMs  ", "")).unwrap();
        assert_eq!(id.as_str(), "c1");
        assert_eq!(pass.note, "flaky VMs");
        assert_eq!(pass.reason, None);
        assert_eq!(
            pass_of(req("n", "guest_*")).unwrap().1.reason.as_deref(),
            Some("guest_*")
        );
        let field = |r: pb::RetryRequest| pass_of(r).unwrap_err().message().to_owned();
        assert!(field(req("   ", "")).contains("note"));
        assert!(field(req(&"x".repeat(MAX_NOTE_BYTES + 1), "")).contains("note"));
        assert!(field(req("n", &"x".repeat(MAX_REASON_GLOB_BYTES + 1))).contains("reason"));
        let mut r = req("n", "");
        r.excluded = false;
        assert!(field(r).contains("excluded"));
        let mut r = req("n", "");
        r.id = "../x".into();
        assert!(field(r).contains("id"));
    }
}
