//! Campaigns, tokens, no-work answers and worker offers.

use super::*;

fn campaign_round_trip(c: &Campaign) -> Campaign {
    let req = pb::SubmitRequest::try_from(c).unwrap();
    assert_eq!(req.tasks.len(), c.tasks.len());
    Campaign::try_from(req).unwrap()
}

#[test]
fn a_campaign_round_trips_through_a_submit_request() {
    let c = campaign(CAMPAIGN);
    let back = campaign_round_trip(&c);
    assert_eq!(back, c);
    assert_eq!(
        spec_hash(&back.spec, &back.tasks),
        spec_hash(&c.spec, &c.tasks)
    );
    assert_eq!(
        schedule::trials(&back).collect::<Vec<_>>(),
        schedule::trials(&c).collect::<Vec<_>>()
    );
}

#[test]
fn a_command_driver_campaign_round_trips() {
    let text = CAMPAIGN
        .lines()
        .map(|l| {
            if l.starts_with("sim = ") {
                r#"command = ["python3", "driver.py", "--flag"]"#
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let c = campaign(&text);
    assert!(matches!(c.spec.driver.kind, spec::DriverKind::Command(_)));
    assert_eq!(campaign_round_trip(&c), c);
}

/// The field a refused submit names first.
fn first_field(r: pb::SubmitRequest) -> String {
    Campaign::try_from(r).unwrap_err().violations[0]
        .field
        .clone()
}

#[test]
fn invalid_submit_requests_name_the_field() {
    let c = campaign(CAMPAIGN);
    let good = pb::SubmitRequest::try_from(&c).unwrap();

    let mut r = good.clone();
    r.tasks[1].id = r.tasks[0].id.clone();
    assert_eq!(first_field(r), "tasks[1].id");

    let mut r = good.clone();
    r.tasks[1].id = "bad/id".into();
    assert_eq!(first_field(r), "tasks[1].id");

    let mut r = good.clone();
    r.tasks[0].payload_json = "{oops".into();
    assert_eq!(first_field(r), "tasks[0].payload_json");

    let mut r = good.clone();
    r.tasks[0].payload_json = format!("{{\"s\":\"{}\"}}", "x".repeat(70_000));
    assert_eq!(first_field(r), "tasks[0].payload_json");

    let mut r = good.clone();
    r.tasks.clear();
    assert_eq!(first_field(r), "tasks");

    let mut r = good.clone();
    r.spec = Some(pb::submit_request::Spec::SpecJson("[]".into()));
    assert_eq!(first_field(r), "spec_json");

    let mut spec = c.spec.clone();
    spec.arms.clear();
    let mut r = good.clone();
    r.spec = Some(pb::submit_request::Spec::SpecJson(
        serde_json::to_string(&spec).unwrap(),
    ));
    assert_eq!(first_field(r), "spec_json.arms");

    let mut spec = c.spec.clone();
    spec.phase1_runs = 0;
    let mut r = good;
    r.spec = Some(pb::submit_request::Spec::SpecJson(
        serde_json::to_string(&spec).unwrap(),
    ));
    assert_eq!(first_field(r), "spec_json.phase1_runs");
}

#[test]
fn tokens_convert_both_ways() {
    let t = token(5);
    let w = pb::Token::from(&t);
    assert_eq!(w.trial_id, t.trial_id.as_str());
    assert_eq!(Token::try_from(w).unwrap(), t);
    assert!(TrialId::new(t.trial_id.as_str()).is_ok());
}

#[test]
fn no_work_answers_carry_the_reason_and_its_words() {
    use lanes_common::convert::no_work;
    use lanes_common::policy::{ClaimGateInForce, NoWorkReason};
    use lanes_common::state::StopReason;

    let cases = [
        (
            NoWorkReason::Stopped {
                stop_reason: Some(StopReason::Budget),
            },
            pb::NoWorkReason::Stopped,
            "stopped (STOPPED_BUDGET)",
        ),
        (NoWorkReason::Done, pb::NoWorkReason::Done, "done"),
        (
            NoWorkReason::QuotaWait {
                provider: "openai".into(),
                until_ms: 1_796_083_200_000,
            },
            pb::NoWorkReason::QuotaWait,
            "quota_wait:openai until 2026-12-01T00:00:00Z",
        ),
        (
            NoWorkReason::NoCampaigns,
            pb::NoWorkReason::NoCampaigns,
            "no_campaigns",
        ),
        (
            NoWorkReason::StoreUnavailable {
                error: "connection refused".into(),
            },
            pb::NoWorkReason::StoreUnavailable,
            "store unavailable: connection refused",
        ),
    ];
    for (reason, wire, words) in cases {
        let w = no_work("lane-1".into(), &reason, 1_500);
        assert_eq!(w.reason(), wire);
        assert_eq!(w.detail, words);
        assert_eq!((w.lane.as_str(), w.retry_after_ms), ("lane-1", 1_500));
    }

    let g = pb::GateInForce::from(ClaimGateInForce::quota_wait("openai", 7));
    assert_eq!(
        (g.gate.as_str(), g.detail.as_str(), g.until_epoch_ms),
        ("quota_wait", "openai", Some(7))
    );
}

/// A worker's offer travels in `Register` and back unchanged; a bad driver name, campaign id
/// or env name (reserved ones included) is refused with the field named.
#[test]
fn a_worker_offer_round_trips_and_bad_entries_are_named() {
    use lanes_common::convert::{register_offer, worker_offer};
    use lanes_common::ids::{CampaignId, DriverName};
    use lanes_common::policy::WorkerOffer;
    let offer = WorkerOffer {
        drivers: [(
            DriverName::new("osworld").unwrap(),
            ["OPENAI_API_KEY".to_owned()].into(),
        )]
        .into(),
        campaign_commands: true,
        command_env: ["HF_TOKEN".to_owned()].into(),
        driver_override: false,
        campaigns: Some([CampaignId::new("mine").unwrap()].into()),
        containers: true,
    };
    let mut r = pb::Register::default();
    register_offer(&offer, &mut r);
    assert_eq!(worker_offer(&r).unwrap(), offer);
    assert_eq!(
        worker_offer(&pb::Register::default()).unwrap(),
        WorkerOffer::default()
    );

    let refused = |edit: &dyn Fn(&mut pb::Register)| {
        let mut bad = r.clone();
        edit(&mut bad);
        worker_offer(&bad).unwrap_err()
    };
    let e = refused(&|r| r.drivers[0].name = "os world".into());
    assert_eq!(e.field, "register.drivers[0].name");
    let e = refused(&|r| r.drivers[0].env.push("LD_PRELOAD".into()));
    assert!(
        e.field.starts_with("register.drivers[0].env") && e.reason.contains("LD_PRELOAD"),
        "{e}"
    );
    let e = refused(&|r| r.command_env.push("PATH".into()));
    assert!(
        e.field.starts_with("register.command_env") && e.reason.contains("PATH"),
        "{e}"
    );
    let e = refused(&|r| r.campaigns.push("../x".into()));
    assert_eq!(e.field, "register.campaigns[1]");
    let e = refused(&|r| {
        let d = r.drivers[0].clone();
        r.drivers.push(d);
    });
    assert_eq!(e.field, "register.drivers[1].name");
}
