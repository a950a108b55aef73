//! The store conformance suite: every case is written once, generic over the backend, and
//! instantiated per backend with the backend's name in the test name. The cases live in one
//! module per subject; this file names which run on which backend.

#[path = "../support/mod.rs"]
mod support;

mod campaigns;
mod leases;
mod restarts;
mod retries_and_gates;
mod scheduling;

use std::collections::BTreeSet;

use lanes_common::policy::{ClaimGate, NoWorkReason, TrialHistory};
use lanes_common::row::{ExcludedReason, FailureKind, Phase, QuotaReading, Status};
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_coordinator::store::{
    ClaimOutcome, ClaimRequest, Release, ReleaseReason, RenewState, StoreError, SubmitKind,
};
use support::*;

use campaigns::*;
use leases::*;
use restarts::*;
use retries_and_gates::*;
use scheduling::*;

/// Lease TTL used by most cases.
const TTL: i64 = 10;

per_backend!(embedded => Harness::embedded();
    a_claim_refuses_a_driver_the_worker_does_not_run,
    schedule_order_and_whole_groups,
    first_scored_wins_under_32_concurrent_completions,
    complete_is_idempotent_and_unknown_tokens_are_rejected,
    stale_token_cannot_renew_release_or_drop_newer_lease,
    renew_fails_past_the_hard_deadline,
    two_reapers_racing_take_an_expired_lease_once,
    reap_waits_two_seconds_past_the_deadline,
    undelivered_assignment_is_cancelled_without_budget,
    lease_past_evaluate_waits_out_publish_grace,
    late_score_after_reap_is_counted,
    late_score_turns_an_excluded_trial_counted,
    late_score_revokes_the_newer_lease,
    late_outcome_after_a_score_is_duplicate_evidence,
    delayed_retries_are_claimable_only_at_their_time,
    a_claim_finds_work_behind_many_trials_blocked_on_its_lane,
    exhausted_infra_budget_is_final_and_excluded,
    auth_failure_with_budget_spent_stops_the_campaign,
    stop_drain_lets_in_flight_finish,
    stop_cancel_cancels_in_flight_without_budget,
    budget_gate_stops_at_the_cap,
    quota_gate_pauses_only_its_provider,
    phase1_pending_answers_wait,
    phase2_block_refused_gets_not_started_rows_and_ends_done,
    a_started_phase2_block_is_not_refused_later,
    resume_is_idempotent_refuses_drift_and_records_growth,
    lane_arms_filter_claims,
    a_rate_limit_pauses_its_provider_until_the_reset,
    sixteen_concurrent_claims_against_a_cap_for_five_admit_five,
    a_trial_that_would_end_after_the_cutoff_is_not_started,
    an_infra_retry_prefers_another_host_then_falls_back,
    large_submit_and_amendment_are_whole,
    late_score_after_an_undelivered_reap_counts_once,
    embedded_file_reopened_keeps_everything,
    delete_frees_a_campaign_that_runs_nothing,
    an_operator_retry_pass_requeues_excluded_trials,
    a_login_code_is_good_once_until_it_expires,
    a_task_folder_is_kept_once_by_digest,
);

per_backend!(redis => Harness::redis().await;
    a_claim_refuses_a_driver_the_worker_does_not_run,
    schedule_order_and_whole_groups,
    first_scored_wins_under_32_concurrent_completions,
    complete_is_idempotent_and_unknown_tokens_are_rejected,
    stale_token_cannot_renew_release_or_drop_newer_lease,
    renew_fails_past_the_hard_deadline,
    two_reapers_racing_take_an_expired_lease_once,
    reap_waits_two_seconds_past_the_deadline,
    undelivered_assignment_is_cancelled_without_budget,
    lease_past_evaluate_waits_out_publish_grace,
    late_score_after_reap_is_counted,
    late_score_turns_an_excluded_trial_counted,
    late_score_revokes_the_newer_lease,
    late_outcome_after_a_score_is_duplicate_evidence,
    delayed_retries_are_claimable_only_at_their_time,
    a_claim_finds_work_behind_many_trials_blocked_on_its_lane,
    exhausted_infra_budget_is_final_and_excluded,
    auth_failure_with_budget_spent_stops_the_campaign,
    stop_drain_lets_in_flight_finish,
    stop_cancel_cancels_in_flight_without_budget,
    budget_gate_stops_at_the_cap,
    quota_gate_pauses_only_its_provider,
    phase1_pending_answers_wait,
    phase2_block_refused_gets_not_started_rows_and_ends_done,
    a_started_phase2_block_is_not_refused_later,
    resume_is_idempotent_refuses_drift_and_records_growth,
    lane_arms_filter_claims,
    a_rate_limit_pauses_its_provider_until_the_reset,
    sixteen_concurrent_claims_against_a_cap_for_five_admit_five,
    a_trial_that_would_end_after_the_cutoff_is_not_started,
    an_infra_retry_prefers_another_host_then_falls_back,
    large_submit_and_amendment_are_whole,
    late_score_after_an_undelivered_reap_counts_once,
    redis_restart_keeps_every_acknowledged_outcome_score_and_lease,
    redis_kill9_mid_complete_errors_and_the_retry_lands_once,
    redis_without_fsync_always_is_refused_unless_allowed,
    redis_restarted_lossy_is_not_written_to_until_durable_again,
    delete_frees_a_campaign_that_runs_nothing,
    an_operator_retry_pass_requeues_excluded_trials,
    a_login_code_is_good_once_until_it_expires,
    a_task_folder_is_kept_once_by_digest,
);
