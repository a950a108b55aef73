//! A model-based property test of the store.
//!
//! Eight simulated lanes on three hosts interleave claims, renewals (in any phase, `publish`
//! included), completions with random outcomes, releases, late completions of tokens that were
//! reaped, replays of acknowledged completions, crashes (a crashed lane forgets its tokens),
//! reaps (sometimes two at once) and clock jumps. The test keeps a small reference model: every
//! token the store issued, what each lease's deadline should be from the lanes' answers, and
//! every acknowledged completion. Then lanes stop crashing: a deterministic drain completes
//! every trial with a score until the campaign is done and nothing is in flight, and the ledger
//! is checked against the model and the retry policy: first scored attempt wins, no
//! acknowledged outcome is lost, every trial ends final, attempts have no gaps, budgets match
//! the policy, seq is contiguous, and the reaper never takes a lease that still holds.
//!
//! The case is generic over the backend: `model_backend!(name => make_harness)` instantiates
//! it in a module named after the backend, so every test name contains the backend's name.
//!
//! One module per subject:
//! - [`operations`]: the random phase's operations, their strategies and how each is applied
//!   to the store and the model;
//! - [`model`]: the reference model, and completions and renewals checked against it;
//! - [`case`]: one case: a fresh campaign, the random operations, then the drain;
//! - [`ledger`]: the ledger checked against the model and the retry policy.

#[path = "../support/mod.rs"]
mod support;

mod case;
mod ledger;
mod model;
mod operations;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::policy::TrialHistory;
use lanes_common::policy::retry::uses_infra_budget;
use lanes_common::row::{ExcludedReason, FailureKind, Outcome, Phase, Row, Status};
use lanes_common::state::CampaignState;
use lanes_coordinator::store::{
    AssignedTrial, ClaimOutcome, CompleteAck, REAP_GRACE_MS, Release, ReleaseReason, RenewState,
    StoreError,
};

use support::{Harness, campaign, cid, infra, request, scored};

use case::*;
use ledger::*;
use model::*;
use operations::*;

/// Simulated lanes of the random phase, `lane-0..7`, on `host-0..2`.
const LANES: usize = 8;
const HOSTS: usize = 3;
const LEASE_TTL_S: i64 = 10;
const PUBLISH_GRACE_S: i64 = 20;
const INFRA_RETRIES: u32 = 1;
const OVERLOADED_RETRIES: u32 = 2;
/// Drain iterations before the test gives up on the campaign ever being done.
const DRAIN_LIMIT: usize = 100;
/// Cases per test, unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 24;
const MAX_OPS: usize = 120;

/// Instantiates the model test for one backend, in a module named after it. `$make` builds a
/// fresh harness (it may `.await`); each proptest case gets its own.
macro_rules! model_backend {
    ($backend:ident => $make:expr) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::support::*;
            use proptest::prelude::*;

            proptest! {
                #![proptest_config(super::config())]

                #[test]
                fn model_pairing_none(ops in super::ops()) {
                    super::runtime().block_on(async {
                        #[allow(unused_mut)]
                        let mut h = $make;
                        super::model_case(&mut h, "none", &ops).await
                    })?;
                }

                #[test]
                fn model_pairing_group(ops in super::ops()) {
                    super::runtime().block_on(async {
                        #[allow(unused_mut)]
                        let mut h = $make;
                        super::model_case(&mut h, "group", &ops).await
                    })?;
                }
            }
        }
    };
}

model_backend!(embedded => Harness::embedded());
model_backend!(redis => Harness::redis().await);
model_backend!(redis_replicas => Harness::redis_replicas().await);
