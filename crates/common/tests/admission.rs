//! Admission (the claim gates, and the gates in force that status shows) and the phase-2 rule.

use std::collections::BTreeMap;

use lanes_common::policy::admission::{BudgetGate, budget_gate, quota_gate};
use lanes_common::policy::{
    AdmissionInput, AdmissionVerdict, ClaimGate, ClaimGateInForce, NoWorkReason, Phase2Input,
    ProviderGate, QuotaGate, admission_verdict, gates_in_force, phase2_block,
};
use lanes_common::row::{Phase2Refusal, QuotaReading};
use lanes_common::state::{CampaignState, StopReason};
use lanes_common::utc::EpochMs;

const NOW: EpochMs = 1_800_000_000_000;
const NOW_S: i64 = NOW / 1000;

fn reading(provider: &str, utilisation: f64, reset_epoch: Option<i64>) -> QuotaReading {
    QuotaReading {
        provider: provider.into(),
        utilisation,
        reset_epoch,
    }
}

/// Owns what a `AdmissionInput` borrows.
struct World {
    quotas: BTreeMap<String, QuotaReading>,
    paused_until: BTreeMap<String, EpochMs>,
    providers: Vec<String>,
}

impl World {
    fn new(providers: &[&str]) -> Self {
        Self {
            quotas: BTreeMap::new(),
            paused_until: BTreeMap::new(),
            providers: providers.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn quota(mut self, provider: &str, utilisation: f64, reset_epoch: Option<i64>) -> Self {
        self.quotas
            .insert(provider.into(), reading(provider, utilisation, reset_epoch));
        self
    }

    fn paused(mut self, provider: &str, until_ms: EpochMs) -> Self {
        self.paused_until.insert(provider.into(), until_ms);
        self
    }

    /// A running campaign with no cutoff, no cap and the default quota thresholds.
    fn input(&self) -> AdmissionInput<'_> {
        AdmissionInput {
            now_ms: NOW,
            state: CampaignState::Running,
            stop_reason: None,
            cutoff_ms: None,
            budget_cap_usd: None,
            spend_usd: 0.0,
            reserved_usd: 0.0,
            quota_wait: 0.95,
            quota_stop: None,
            quotas: &self.quotas,
            paused_until: &self.paused_until,
            providers: &self.providers,
            phase1_total: 0,
            phase1_final: 0,
            has_phase2: false,
        }
    }
}

fn open(gates: &[(&str, ProviderGate)]) -> AdmissionVerdict {
    AdmissionVerdict::Open(
        gates
            .iter()
            .map(|(p, g)| (p.to_string(), g.clone()))
            .collect(),
    )
}

// ---- stop ------------------------------------------------------------------------------------

#[test]
fn stopping_and_stopped_campaigns_wait_with_their_stop_reason() {
    let w = World::new(&["p"]);
    for state in [CampaignState::Stopping, CampaignState::Stopped] {
        for stop_reason in [None, Some(StopReason::User), Some(StopReason::Budget)] {
            let input = AdmissionInput {
                state,
                stop_reason,
                // A stop wins over every later gate.
                cutoff_ms: Some(NOW - 1),
                ..w.input()
            };
            assert_eq!(
                admission_verdict(&input),
                AdmissionVerdict::Wait(NoWorkReason::Stopped { stop_reason }),
                "{state}"
            );
        }
    }
}

#[test]
fn a_done_campaign_waits_with_done() {
    let w = World::new(&["p"]);
    let input = AdmissionInput {
        state: CampaignState::Done,
        ..w.input()
    };
    assert_eq!(
        admission_verdict(&input),
        AdmissionVerdict::Wait(NoWorkReason::Done)
    );
}

// ---- cutoff ----------------------------------------------------------------------------------

#[test]
fn nothing_starts_at_or_after_the_cutoff() {
    let w = World::new(&["p"]);
    for cutoff in [NOW, NOW - 1] {
        let input = AdmissionInput {
            cutoff_ms: Some(cutoff),
            ..w.input()
        };
        assert_eq!(
            admission_verdict(&input),
            AdmissionVerdict::Stop(StopReason::Time)
        );
    }
    let input = AdmissionInput {
        cutoff_ms: Some(NOW + 1),
        ..w.input()
    };
    assert_eq!(admission_verdict(&input), open(&[("p", ProviderGate::Go)]));
}

// ---- budget ----------------------------------------------------------------------------------

#[test]
fn spend_at_the_cap_stops_the_campaign() {
    let w = World::new(&["p"]);
    for spend in [10.0, 12.5] {
        let input = AdmissionInput {
            budget_cap_usd: Some(10.0),
            spend_usd: spend,
            reserved_usd: 3.0,
            ..w.input()
        };
        assert_eq!(
            admission_verdict(&input),
            AdmissionVerdict::Stop(StopReason::Budget)
        );
    }
}

#[test]
fn open_reservations_that_reach_the_cap_make_claims_wait() {
    let w = World::new(&["p"]);
    let input = AdmissionInput {
        budget_cap_usd: Some(10.0),
        spend_usd: 6.0,
        reserved_usd: 4.0,
        ..w.input()
    };
    assert_eq!(
        admission_verdict(&input),
        AdmissionVerdict::Wait(NoWorkReason::BudgetReserved)
    );
}

#[test]
fn a_claim_that_fits_under_the_cap_goes() {
    let w = World::new(&["p"]);
    let input = AdmissionInput {
        budget_cap_usd: Some(10.0),
        spend_usd: 6.0,
        reserved_usd: 2.0,
        ..w.input()
    };
    assert_eq!(admission_verdict(&input), open(&[("p", ProviderGate::Go)]));
    // No cap, no budget gate.
    let input = AdmissionInput {
        spend_usd: 1e9,
        reserved_usd: 1e9,
        ..w.input()
    };
    assert_eq!(admission_verdict(&input), open(&[("p", ProviderGate::Go)]));
}

#[test]
fn budget_gate_table() {
    let cap = Some(10.0);
    assert_eq!(budget_gate(None, 100.0, 100.0), BudgetGate::Go);
    // Spend alone reaching the cap stops, whatever is reserved.
    assert_eq!(budget_gate(cap, 10.0, 0.0), BudgetGate::Stop);
    assert_eq!(budget_gate(cap, 10.5, 2.0), BudgetGate::Stop);
    // Spend plus reservations reaching the cap waits for the reservations to settle.
    assert_eq!(budget_gate(cap, 9.0, 1.0), BudgetGate::Wait);
    assert_eq!(budget_gate(cap, 9.0, 1.5), BudgetGate::Wait);
    // Below the cap goes.
    assert_eq!(budget_gate(cap, 9.0, 0.5), BudgetGate::Go);
    assert_eq!(budget_gate(cap, 9.99, 0.0), BudgetGate::Go);
    assert_eq!(budget_gate(cap, 0.0, 0.0), BudgetGate::Go);
}

// ---- quota -----------------------------------------------------------------------------------

#[test]
fn quota_at_or_above_wait_gates_only_that_providers_arms() {
    let reset = NOW_S + 600;
    for utilisation in [0.95, 0.97] {
        let w = World::new(&["anthropic", "openai"])
            .quota("anthropic", utilisation, Some(reset))
            .quota("openai", 0.5, Some(reset));
        assert_eq!(
            admission_verdict(&w.input()),
            open(&[
                (
                    "anthropic",
                    ProviderGate::Wait(NoWorkReason::QuotaWait {
                        provider: "anthropic".into(),
                        until_ms: reset * 1000
                    })
                ),
                ("openai", ProviderGate::Go),
            ]),
            "utilisation {utilisation}"
        );
    }
    let w = World::new(&["anthropic"]).quota("anthropic", 0.9499, Some(reset));
    assert_eq!(
        admission_verdict(&w.input()),
        open(&[("anthropic", ProviderGate::Go)])
    );
}

#[test]
fn quota_at_or_above_stop_stops_the_campaign() {
    let reset = NOW_S + 600;
    for utilisation in [0.99, 1.2] {
        let w = World::new(&["anthropic", "openai"]).quota("anthropic", utilisation, Some(reset));
        let input = AdmissionInput {
            quota_stop: Some(0.99),
            ..w.input()
        };
        assert_eq!(
            admission_verdict(&input),
            AdmissionVerdict::Stop(StopReason::Quota)
        );
    }
    // Between wait and stop, it waits.
    let w = World::new(&["anthropic", "openai"]).quota("anthropic", 0.98, Some(reset));
    let input = AdmissionInput {
        quota_stop: Some(0.99),
        ..w.input()
    };
    let verdict = admission_verdict(&input);
    assert!(
        matches!(&verdict, AdmissionVerdict::Open(g) if g["openai"] == ProviderGate::Go
        && matches!(g["anthropic"], ProviderGate::Wait(NoWorkReason::QuotaWait { .. }))),
        "{verdict:?}"
    );
}

#[test]
fn a_provider_the_claim_does_not_ask_for_is_not_gated() {
    // Even a stop-level reading of another provider leaves this claim alone.
    let w = World::new(&["openai"]).quota("anthropic", 1.0, Some(NOW_S + 600));
    let input = AdmissionInput {
        quota_stop: Some(0.99),
        ..w.input()
    };
    assert_eq!(
        admission_verdict(&input),
        open(&[("openai", ProviderGate::Go)])
    );
}

#[test]
fn an_expired_quota_reading_goes() {
    for reset in [NOW_S, NOW_S - 3600] {
        let w = World::new(&["anthropic"]).quota("anthropic", 1.0, Some(reset));
        let input = AdmissionInput {
            quota_stop: Some(0.99),
            ..w.input()
        };
        assert_eq!(
            admission_verdict(&input),
            open(&[("anthropic", ProviderGate::Go)])
        );
        assert_eq!(
            quota_gate(w.quotas.get("anthropic"), 0.95, Some(0.99), NOW),
            QuotaGate::Go
        );
    }
}

#[test]
fn quota_gate_without_reset_waits_a_minute() {
    let r = reading("p", 0.96, None);
    assert_eq!(
        quota_gate(Some(&r), 0.95, None, NOW),
        QuotaGate::Wait {
            until_ms: NOW + 60_000
        }
    );
    assert_eq!(quota_gate(None, 0.95, Some(0.99), NOW), QuotaGate::Go);
}

// ---- rate-limit pauses -----------------------------------------------------------------------

#[test]
fn a_rate_limit_pause_gates_its_provider_until_it_ends() {
    let w = World::new(&["anthropic", "openai"]).paused("anthropic", NOW + 5_000);
    assert_eq!(
        admission_verdict(&w.input()),
        open(&[
            (
                "anthropic",
                ProviderGate::Wait(NoWorkReason::RateLimited {
                    provider: "anthropic".into(),
                    until_ms: NOW + 5_000
                })
            ),
            ("openai", ProviderGate::Go),
        ])
    );
    for ended in [NOW, NOW - 1] {
        let w = World::new(&["anthropic"]).paused("anthropic", ended);
        assert_eq!(
            admission_verdict(&w.input()),
            open(&[("anthropic", ProviderGate::Go)])
        );
    }
}

#[test]
fn when_every_provider_waits_the_answer_is_the_soonest() {
    let w = World::new(&["anthropic", "google", "openai"])
        .quota("anthropic", 0.97, Some(NOW_S + 120))
        .paused("google", NOW + 90_000)
        .paused("openai", NOW + 30_000);
    let expected = NoWorkReason::RateLimited {
        provider: "openai".into(),
        until_ms: NOW + 30_000,
    };
    assert_eq!(
        admission_verdict(&w.input()),
        AdmissionVerdict::Wait(expected.clone())
    );
    assert_eq!(expected.retry_after_ms(NOW, 1_000), 10_000);

    let w = World::new(&["anthropic", "openai"])
        .quota("anthropic", 0.97, Some(NOW_S + 20))
        .paused("openai", NOW + 30_000);
    let expected = NoWorkReason::QuotaWait {
        provider: "anthropic".into(),
        until_ms: NOW + 20_000,
    };
    assert_eq!(
        admission_verdict(&w.input()),
        AdmissionVerdict::Wait(expected.clone())
    );
    assert_eq!(expected.retry_after_ms(NOW, 5_000), 20_000);
}

// ---- gates in force ----------------------------------------------------------------------

#[test]
fn claim_gate_names_are_the_strings_status_and_events_show() {
    let names: Vec<&str> = ClaimGate::ALL.iter().map(|g| g.as_str()).collect();
    assert_eq!(
        names,
        [
            "quota_wait",
            "quota_stop",
            "rate_limit_pause",
            "budget",
            "phase1_pending"
        ]
    );
    for g in ClaimGate::ALL {
        assert_eq!(serde_json::to_string(&g).unwrap(), format!("\"{g}\""));
        assert_eq!(g.to_string(), g.as_str());
    }
    // Stored events keep their form.
    let stored = r#"{"gate":"rate_limit_pause","detail":"openai","until_ms":5}"#;
    let g: ClaimGateInForce = serde_json::from_str(stored).unwrap();
    assert_eq!(g, ClaimGateInForce::rate_limit_pause("openai", 5));
    assert_eq!(serde_json::to_string(&g).unwrap(), stored);
}

#[test]
fn gates_in_force_list_each_provider_then_budget_then_phase1() {
    let reset = NOW_S + 600;
    let w = World::new(&["anthropic", "google", "openai"])
        .quota("anthropic", 0.97, Some(reset))
        .paused("anthropic", NOW + 5_000)
        .quota("google", 1.0, Some(reset))
        .paused("openai", NOW + 9_000)
        .paused("zeta", NOW + 9_000);
    let input = AdmissionInput {
        quota_stop: Some(0.99),
        budget_cap_usd: Some(10.0),
        spend_usd: 6.0,
        reserved_usd: 4.0,
        phase1_total: 8,
        phase1_final: 3,
        has_phase2: true,
        ..w.input()
    };
    assert_eq!(
        gates_in_force(&input),
        [
            ClaimGateInForce::quota_wait("anthropic", reset * 1000),
            ClaimGateInForce::rate_limit_pause("anthropic", NOW + 5_000),
            ClaimGateInForce::quota_stop("google"),
            ClaimGateInForce::rate_limit_pause("openai", NOW + 9_000),
            ClaimGateInForce {
                gate: ClaimGate::Budget,
                detail: "spend 6.00 + reserved 4.00 of cap 10.00".into(),
                until_ms: None,
            },
            ClaimGateInForce {
                gate: ClaimGate::Phase1Pending,
                detail: "3 of 8 phase-1 trials final".into(),
                until_ms: None,
            },
        ]
    );
    // Nothing holds a fresh campaign back; phase 1 pending needs phase-2 runs.
    let input = AdmissionInput {
        budget_cap_usd: Some(10.0),
        spend_usd: 6.0,
        reserved_usd: 3.9,
        phase1_total: 8,
        ..w.input()
    };
    assert_eq!(gates_in_force(&World::new(&["p"]).input()), []);
    assert_eq!(
        gates_in_force(&AdmissionInput {
            providers: &[],
            ..input
        }),
        []
    );
}

#[test]
fn a_quota_wait_wins_over_a_pause_of_the_same_provider() {
    let w = World::new(&["anthropic", "openai"])
        .quota("anthropic", 0.97, Some(NOW_S + 600))
        .paused("anthropic", NOW + 5_000);
    assert_eq!(
        admission_verdict(&w.input()),
        open(&[
            (
                "anthropic",
                ProviderGate::Wait(NoWorkReason::QuotaWait {
                    provider: "anthropic".into(),
                    until_ms: (NOW_S + 600) * 1000
                })
            ),
            ("openai", ProviderGate::Go),
        ])
    );
}

// ---- phase 2 ---------------------------------------------------------------------------------

fn phase2<'a>(
    cutoff_ms: Option<EpochMs>,
    walls: &'a [f64],
    active_lanes: u32,
    quotas: &'a [(String, QuotaGate)],
) -> Phase2Input<'a> {
    Phase2Input {
        now_ms: NOW,
        cutoff_ms,
        finished_block_walls: walls,
        active_lanes,
        quotas,
    }
}

#[test]
fn phase2_block_refused_when_a_needed_quota_is_not_go() {
    let quotas = [
        ("anthropic".to_string(), QuotaGate::Go),
        ("openai".to_string(), QuotaGate::Wait { until_ms: NOW + 1 }),
    ];
    assert_eq!(
        phase2_block(&phase2(None, &[], 1, &quotas)),
        Err(Phase2Refusal::Quota("openai".into()))
    );
    let quotas = [("google".to_string(), QuotaGate::Stop)];
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 3_600_000), &[10.0], 4, &quotas)),
        Err(Phase2Refusal::Quota("google".into()))
    );
    let quotas = [
        ("anthropic".to_string(), QuotaGate::Go),
        ("openai".to_string(), QuotaGate::Go),
    ];
    assert_eq!(phase2_block(&phase2(None, &[], 1, &quotas)), Ok(()));
}

#[test]
fn phase2_block_fits_when_now_plus_median_over_lanes_is_before_the_cutoff() {
    // Median of 100, 400 and 1000 is 400 s; over 4 lanes, 100 s.
    let walls = [1000.0, 100.0, 400.0];
    let go = [("p".to_string(), QuotaGate::Go)];
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 100_000), &walls, 4, &go)),
        Ok(()),
        "an estimate that ends exactly at the cutoff fits"
    );
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 99_999), &walls, 4, &go)),
        Err(Phase2Refusal::Cutoff)
    );
    // One lane: 400 s.
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 399_000), &walls, 1, &go)),
        Err(Phase2Refusal::Cutoff)
    );
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 400_000), &walls, 1, &go)),
        Ok(())
    );
    // Even count: the median is the mean of the middle two, (100 + 400) / 2 = 250 s.
    let walls = [100.0, 400.0, 50.0, 900.0];
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 125_000), &walls, 2, &go)),
        Ok(())
    );
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 124_999), &walls, 2, &go)),
        Err(Phase2Refusal::Cutoff)
    );
    // No cutoff, no cutoff refusal.
    assert_eq!(phase2_block(&phase2(None, &walls, 1, &go)), Ok(()));
}

#[test]
fn phase2_block_with_no_finished_blocks_goes() {
    let go = [("p".to_string(), QuotaGate::Go)];
    assert_eq!(
        phase2_block(&phase2(Some(NOW + 1_000), &[], 3, &go)),
        Ok(())
    );
    assert_eq!(phase2_block(&phase2(None, &[], 0, &go)), Ok(()));
    // Without an estimate, only a cutoff already passed refuses the block.
    assert_eq!(
        phase2_block(&phase2(Some(NOW - 1), &[], 3, &go)),
        Err(Phase2Refusal::Cutoff)
    );
}
