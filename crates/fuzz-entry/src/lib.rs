//! The bodies of the fuzz targets under `fuzz/` (cargo-fuzz, on nightly): one module per
//! target, each a `fuzz_one(data)` that feeds the input to the production code and checks what
//! must hold whatever the input is. A panic is a finding.
//!
//! The fuzz targets call these functions, and so does the stable test suite
//! (`tests/corpus_replay.rs`), which replays every file of `fuzz/corpus/<target>/`: an input
//! that once found a bug stays in the corpus, and the bug stays fixed.

pub mod archive_reader;
pub mod campaign_toml;
pub mod dashboard_paths;
pub mod driver_codec;
pub mod hot_record;
pub mod lane_messages;
pub mod packed_entry;
pub mod submit_spec_json;
pub mod tasks_jsonl;

/// A target's body: one input, fed to the production code.
pub type FuzzOne = fn(&[u8]);

/// Every target: its name (its file under `fuzz/fuzz_targets/`, its corpus under
/// `fuzz/corpus/`) and its body.
pub const TARGETS: &[(&str, FuzzOne)] = &[
    ("archive_reader", archive_reader::fuzz_one),
    ("campaign_toml", campaign_toml::fuzz_one),
    ("dashboard_paths", dashboard_paths::fuzz_one),
    ("driver_codec", driver_codec::fuzz_one),
    ("hot_record", hot_record::fuzz_one),
    ("lane_messages", lane_messages::fuzz_one),
    ("packed_entry", packed_entry::fuzz_one),
    ("submit_spec_json", submit_spec_json::fuzz_one),
    ("tasks_jsonl", tasks_jsonl::fuzz_one),
];

/// A campaign read back from its submission, as `lanes submit` sends it and the coordinator's
/// Submit handler reads it, must be the campaign that was sent, with the same spec hash.
fn submits_unchanged(c: &lanes_common::spec::Campaign) {
    use lanes_common::proto as pb;
    use lanes_common::spec::Campaign;
    use lanes_common::spec_hash::spec_hash;

    let request = pb::SubmitRequest::try_from(c).expect("a valid campaign has a SubmitRequest");
    let back = Campaign::try_from(request)
        .unwrap_or_else(|e| panic!("a valid campaign is refused as a submission: {e}"));
    assert_eq!(
        &back, c,
        "a campaign changed on its way through a submission"
    );
    assert_eq!(
        spec_hash(&back.spec, &back.tasks),
        spec_hash(&c.spec, &c.tasks),
        "a campaign's spec hash changed on its way through a submission"
    );
}
