//! The case: a fresh campaign, the random operations, the leases in flight checked, then
//! the drain that lets every trial end.

use super::*;

/// Runs `ops` on a fresh campaign, drains it, and checks the ledger.
pub(super) async fn model_case(
    h: &mut Harness,
    pairing: &str,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let c = cid("model");
    let head = format!(
        "phase1_runs = 2\npairing = \"{pairing}\"\nlease_ttl_s = {LEASE_TTL_S}\n\
         publish_grace_s = {PUBLISH_GRACE_S}\n"
    );
    let retry = format!(
        "[retry]\ninfra_retries = {INFRA_RETRIES}\ninfra_backoff_s = 0\n\
         overloaded_retries = {OVERLOADED_RETRIES}\noverloaded_backoff_s = 5\n"
    );
    h.submit(campaign(
        "model",
        &[("A", "prov-a"), ("B", "prov-b")],
        3,
        &head,
        &retry,
    ))
    .await;

    let mut m = Model::new();
    for (n, op) in ops.iter().enumerate() {
        apply(h, &c, &mut m, op)
            .await
            .map_err(|e| fail(format!("op #{n} {op:?}: {e}")))?;
    }
    check_in_flight(h, &c, &m).await?;
    drain(h, &c, &mut m).await?;
    check_ledger(h, &c, &m, pairing == "group").await
}

/// Every lease the store holds belongs to the newest token issued for its trial.
async fn check_in_flight(h: &Harness, c: &CampaignId, m: &Model) -> Result<(), TestCaseError> {
    let st = h
        .store
        .status(c, h.now())
        .await
        .map_err(store_err("status"))?;
    for f in &st.in_flight {
        let newest = m
            .issued
            .iter()
            .filter(|t| t.trial_id == f.token.trial_id)
            .map(|t| t.attempt)
            .max();
        prop_assert_eq!(
            newest,
            Some(f.token.attempt),
            "in-flight {} is not the newest token of its trial",
            f.token
        );
    }
    Ok(())
}

/// Lanes stop crashing: the live lanes publish what they hold, then fresh lanes claim, renew
/// and score everything until the campaign is done and nothing is in flight.
async fn drain(h: &Harness, c: &CampaignId, m: &mut Model) -> Result<(), TestCaseError> {
    for i in 0..LANES {
        for token in std::mem::take(&mut m.held[i]) {
            let o = scored(&token, &lane_name(i), &host_name(i), Status::Completed, 1.0);
            complete(h, c, m, &token, o).await?;
        }
    }
    for iter in 0..DRAIN_LIMIT {
        let st = h
            .store
            .status(c, h.now())
            .await
            .map_err(store_err("status"))?;
        if st.state == CampaignState::Done && st.in_flight.is_empty() {
            return Ok(());
        }
        prop_assert!(
            matches!(st.state, CampaignState::Running | CampaignState::Done),
            "drain {}: campaign {:?} ({:?})",
            iter,
            st.state,
            st.stop_reason
        );
        // Claim from every host until a whole round of hosts gets no work.
        let (mut idle, mut k) = (0, 0);
        while idle < HOSTS && k < 1000 {
            let (lane, host) = (format!("drain-{iter}-{k}"), host_name(k));
            k += 1;
            let got = h
                .store
                .claim(c, request(&lane, &host, 1), h.now())
                .await
                .map_err(store_err("drain claim"))?;
            let ClaimOutcome::Assigned(units) = got else {
                idle += 1;
                continue;
            };
            idle = 0;
            for unit in units {
                for t in unit.trials {
                    m.issue(&t, h.now())?;
                    let renewed = renew(h, c, m, vec![t.token.clone()], Phase::Agent).await?;
                    prop_assert_eq!(
                        renewed[0].1,
                        RenewState::Renewed,
                        "drain renew of {}",
                        t.token
                    );
                    let o = scored(&t.token, &lane, &host, Status::Completed, 1.0);
                    complete(h, c, m, &t.token, o).await?;
                }
            }
        }
        // Past every lease deadline, the publish grace and any retry backoff.
        h.advance_s(25);
        h.store
            .reap(c, h.now())
            .await
            .map_err(store_err("drain reap"))?;
    }
    let st = h
        .store
        .status(c, h.now())
        .await
        .map_err(store_err("status"))?;
    Err(fail(format!(
        "the campaign is not done after {DRAIN_LIMIT} drain rounds: state {:?}, {} of {} trials \
         final, in flight {:?}, gates {:?}",
        st.state, st.trials_final, st.trials_total, st.in_flight, st.gates
    )))
}
