//! The ledger checked against the model and the retry policy, once the campaign is done.

use super::*;

pub(super) async fn check_ledger(
    h: &Harness,
    c: &CampaignId,
    m: &Model,
    group: bool,
) -> Result<(), TestCaseError> {
    let rows: Vec<Row> = h
        .store
        .rows(c, 0, usize::MAX)
        .await
        .map_err(store_err("rows"))?;
    let st = h
        .store
        .status(c, h.now())
        .await
        .map_err(store_err("status"))?;

    // seq values are 0..n, contiguous.
    for (i, row) in rows.iter().enumerate() {
        prop_assert_eq!(row.seq, i as u64, "row {} has seq {}", i, row.seq);
    }
    prop_assert_eq!(st.rows_total, rows.len() as u64, "status rows_total");

    // Every acknowledged completion is in the ledger, as acknowledged.
    for (token, (_, ack)) in &m.acks {
        let row = rows.get(ack.seq as usize);
        prop_assert!(row.is_some(), "ack {:?}: no row with seq {}", ack, ack.seq);
        let row = row.unwrap();
        prop_assert!(
            row.trial_id == token.trial_id && row.attempt == token.attempt,
            "ack {:?}: row {} is {}#a{}",
            ack,
            ack.seq,
            row.trial_id,
            row.attempt
        );
        prop_assert!(
            (row.counted, row.duplicate, row.late) == (ack.counted, ack.duplicate, ack.late),
            "ack {:?} but row {} says counted {} duplicate {} late {}",
            ack,
            row.seq,
            row.counted,
            row.duplicate,
            row.late
        );
        // The winner named is the trial's counted attempt, if it had counted by then.
        let winner = rows
            .iter()
            .find(|r| r.trial_id == token.trial_id && r.counted && r.seq <= ack.seq)
            .map(|r| r.attempt);
        prop_assert_eq!(ack.winner_attempt, winner, "winner in ack {:?}", ack);
    }
    // The reaper takes only leases past their deadline by more than the grace, waits
    // `publish_grace_s` for one past evaluate, and never expires an undelivered assignment.
    for row in rows.iter().filter(|r| r.record.lease_lost) {
        let token = row.token();
        let view = m.leases.get(&token);
        prop_assert!(
            view.is_some(),
            "reaper row {} for a token never issued",
            row.seq
        );
        let view = view.unwrap();
        let at = row.written_utc.epoch_ms();
        prop_assert!(
            at > view.deadline_ms + REAP_GRACE_MS,
            "reaper row {} for {} at {} but the lease ran until {}",
            row.seq,
            token,
            at,
            view.deadline_ms
        );
        if view.phase == Phase::Assigned {
            prop_assert_eq!(
                row.status,
                Status::Cancelled,
                "undelivered {} reaped",
                token
            );
        }
        if view.phase == Phase::Publish && row.failure_kind == Some(FailureKind::LeaseExpired) {
            prop_assert!(
                at >= view.deadline_ms + PUBLISH_GRACE_S * 1000,
                "{} expired at {} inside the publish grace (deadline {})",
                token,
                at,
                view.deadline_ms
            );
        }
    }
    let by_status: u64 = st.rows_by_status.values().sum();
    prop_assert_eq!(by_status, rows.len() as u64, "status rows_by_status");

    // The campaign is done: every trial is final.
    prop_assert_eq!(st.state, CampaignState::Done, "campaign state");
    prop_assert_eq!(st.trials_final, st.trials_total, "trials final");
    prop_assert!(
        st.in_flight.is_empty(),
        "in flight after done: {:?}",
        st.in_flight
    );

    let mut by_trial: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for row in &rows {
        by_trial.entry(row.trial_id.as_str()).or_default().push(row);
    }
    prop_assert_eq!(by_trial.len() as u64, st.trials_total, "trials with rows");

    let (mut counted_trials, mut excluded_trials) = (0u64, 0u64);
    for (tid, trows) in &by_trial {
        let counted: Vec<&&Row> = trows.iter().filter(|r| r.counted).collect();
        let excluded: Vec<&&Row> = trows.iter().filter(|r| r.excluded).collect();
        prop_assert!(
            counted.len() <= 1,
            "{}: {} counted rows",
            tid,
            counted.len()
        );
        prop_assert!(
            excluded.len() <= 1,
            "{}: {} excluded rows",
            tid,
            excluded.len()
        );
        let is_counted = counted.len() == 1;
        let is_excluded = !is_counted && excluded.len() == 1;
        prop_assert!(
            is_counted || is_excluded,
            "{}: neither counted nor excluded",
            tid
        );
        counted_trials += u64::from(is_counted);
        excluded_trials += u64::from(is_excluded);

        // First scored attempt wins: the first scored row counts, later ones are duplicates.
        let mut scored_rows = trows.iter().filter(|r| r.status.is_scored());
        if let Some(first) = scored_rows.next() {
            prop_assert!(
                first.counted,
                "{}: first scored row {} not counted",
                tid,
                first.seq
            );
            prop_assert!(
                first.is_final,
                "{}: counted row {} not final",
                tid,
                first.seq
            );
            for later in scored_rows {
                prop_assert!(
                    later.duplicate && !later.counted,
                    "{}: later scored row {} not a duplicate",
                    tid,
                    later.seq
                );
            }
        } else {
            prop_assert!(!is_counted, "{}: counted without a score", tid);
        }

        // A token's first row is never late; a late row follows one of its token.
        let mut seen = BTreeSet::new();
        for r in trows {
            let first = seen.insert(r.attempt);
            prop_assert!(
                first != r.late || r.attempt == 0,
                "{}: row {} of attempt {} has late = {}, first row of its token = {}",
                tid,
                r.seq,
                r.attempt,
                r.late,
                first
            );
        }

        // Only a run group's first lease is paired: its token's first row says so, and
        // nothing else does (retries are single trials, late rows are not paired).
        let mut seen = BTreeSet::new();
        for r in trows {
            let first = seen.insert(r.attempt);
            let want = group && r.attempt == 1 && first;
            prop_assert_eq!(r.paired, want, "{}: row {} paired", tid, r.seq);
        }

        // Attempts without gaps, and exactly the issued ones.
        let attempts: BTreeSet<u32> = trows.iter().map(|r| r.attempt).filter(|&a| a > 0).collect();
        let max = attempts.iter().max().copied().unwrap_or(0);
        prop_assert_eq!(
            attempts.clone(),
            (1..=max).collect::<BTreeSet<u32>>(),
            "{}: attempt numbers with gaps",
            tid
        );
        let issued: BTreeSet<u32> = m
            .issued
            .iter()
            .filter(|t| t.trial_id.as_str() == *tid)
            .map(|t| t.attempt)
            .collect();
        prop_assert_eq!(
            attempts,
            issued,
            "{}: attempts in rows vs tokens issued",
            tid
        );

        // Budgets match the policy.
        let hist = TrialHistory::from_rows(trows.iter().copied());
        prop_assert!(
            hist.infra_used <= INFRA_RETRIES + 1,
            "{}: infra budget {} used",
            tid,
            hist.infra_used
        );
        prop_assert!(
            hist.overloaded_used <= OVERLOADED_RETRIES + 1,
            "{}: {} overloaded first rows",
            tid,
            hist.overloaded_used
        );
        prop_assert!(hist.is_final, "{}: history not final", tid);
        prop_assert_eq!(
            hist.winner,
            counted.first().map(|r| r.attempt),
            "{}: winner",
            tid
        );
        if is_excluded {
            match &excluded[0].excluded_reason {
                Some(ExcludedReason::InfraFailure(FailureKind::Overloaded)) => prop_assert_eq!(
                    hist.overloaded_used,
                    OVERLOADED_RETRIES + 1,
                    "{}: excluded for overload",
                    tid
                ),
                Some(ExcludedReason::InfraFailure(k)) => {
                    prop_assert!(uses_infra_budget(*k), "{}: excluded for {}", tid, k);
                    prop_assert_eq!(
                        hist.infra_used,
                        INFRA_RETRIES + 1,
                        "{}: excluded for infra_failure:{}",
                        tid,
                        k
                    );
                }
                Some(ExcludedReason::PreflightLimit) => {}
                other => return Err(fail(format!("{tid}: excluded for {other:?}"))),
            }
        }
    }
    if std::env::var_os("LANES_MODEL_STATS").is_some() {
        let count = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| f(r)).count();
        eprintln!(
            "model stats: rows {} acks {} counted {} excluded {} late {} late-counted {} \
             duplicate {} lease_expired {} cancelled {} blocked {} overloaded {}",
            rows.len(),
            m.acks.len(),
            counted_trials,
            excluded_trials,
            count(&|r| r.late),
            count(&|r| r.late && r.counted),
            count(&|r| r.duplicate),
            count(&|r| r.failure_kind == Some(FailureKind::LeaseExpired)),
            count(&|r| r.status == Status::Cancelled),
            count(&|r| r.status == Status::Blocked),
            count(&|r| r.failure_kind == Some(FailureKind::Overloaded)),
        );
    }
    prop_assert_eq!(st.trials_counted, counted_trials, "status trials_counted");
    prop_assert_eq!(
        st.trials_excluded,
        excluded_trials,
        "status trials_excluded"
    );
    Ok(())
}
