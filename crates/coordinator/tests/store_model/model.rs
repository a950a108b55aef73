//! The reference model: the tokens issued, each lease as the lanes' answers describe it, and
//! every acknowledged completion; completions and renewals checked against it.

use super::*;

/// What was sent for an acknowledged token, to replay it identically.
#[derive(Debug, Clone)]
pub(super) enum Sent {
    Complete(Box<Outcome>),
    Release(Release),
}

#[derive(Default)]
pub(super) struct Model {
    /// Tokens each lane holds, in slot order.
    pub(super) held: Vec<Vec<Token>>,
    /// Tokens a lane was told it lost, with that lane: candidates for late completions.
    pub(super) lost: Vec<(Token, usize)>,
    /// Every token the store issued.
    pub(super) issued: BTreeSet<Token>,
    /// Every acknowledged completion or release.
    pub(super) acks: BTreeMap<Token, (Sent, CompleteAck)>,
    /// Acknowledged tokens in order, for replays.
    pub(super) acked: Vec<Token>,
    /// What each token's lease should be, from its claim and its successful renewals.
    pub(super) leases: BTreeMap<Token, LeaseView>,
}

/// A lease as the lanes' answers describe it.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseView {
    pub(super) deadline_ms: i64,
    pub(super) hard_deadline_ms: i64,
    /// The last phase renewed; `Assigned` if never renewed.
    pub(super) phase: Phase,
}

pub(super) fn lane_name(i: usize) -> String {
    format!("lane-{i}")
}

pub(super) fn host_name(i: usize) -> String {
    format!("host-{}", i % HOSTS)
}

pub(super) fn outcome(token: &Token, lane: &str, host: &str, r: Res) -> Outcome {
    match r {
        Res::Scored(status, q) => scored(token, lane, host, status, f64::from(q) / 2.0),
        Res::Infra(kind) => infra(token, lane, host, kind),
    }
}

pub(super) fn fail(what: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(what.to_string())
}

pub(super) fn store_err(what: &str) -> impl FnOnce(StoreError) -> TestCaseError + '_ {
    move |e| fail(format!("{what}: store error {e}"))
}

impl Model {
    pub(super) fn new() -> Self {
        Self {
            held: vec![Vec::new(); LANES],
            ..Self::default()
        }
    }

    /// The `k`-th (mod their number) lane that holds tokens (`busy`) or holds none.
    pub(super) fn lane(&self, k: usize, busy: bool) -> Option<usize> {
        let lanes: Vec<usize> = (0..LANES)
            .filter(|&i| self.held[i].is_empty() != busy)
            .collect();
        (!lanes.is_empty()).then(|| lanes[k % lanes.len()])
    }

    /// A trial some acknowledged completion counted for.
    fn has_winner(&self, token: &Token) -> bool {
        self.acks
            .values()
            .any(|(_, a)| a.counted && a.token.trial_id == token.trial_id)
    }

    pub(super) fn issue(&mut self, t: &AssignedTrial, now: i64) -> Result<(), TestCaseError> {
        let token = &t.token;
        self.leases.insert(
            token.clone(),
            LeaseView {
                deadline_ms: now + LEASE_TTL_S * 1000,
                hard_deadline_ms: now + t.hard_deadline_in_ms as i64,
                phase: Phase::Assigned,
            },
        );
        let prior = self
            .issued
            .iter()
            .filter(|t| t.trial_id == token.trial_id)
            .map(|t| t.attempt)
            .max()
            .unwrap_or(0);
        prop_assert_eq!(
            token.attempt,
            prior + 1,
            "token {} issued after attempt {}: attempts must be issued in order",
            token,
            prior
        );
        prop_assert!(
            self.issued.insert(token.clone()),
            "token {} issued twice",
            token
        );
        Ok(())
    }

    pub(super) fn acked(
        &mut self,
        sent: Sent,
        token: &Token,
        ack: CompleteAck,
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(&ack.token, token, "ack for another token");
        if ack.counted {
            prop_assert_eq!(
                ack.winner_attempt,
                Some(token.attempt),
                "counted ack {:?}",
                ack
            );
            prop_assert!(!ack.duplicate, "counted and duplicate: {:?}", ack);
        }
        prop_assert!(
            !self.acks.contains_key(token),
            "token {} completed twice by the model",
            token
        );
        self.acks.insert(token.clone(), (sent, ack));
        self.acked.push(token.clone());
        Ok(())
    }
}

pub(super) async fn complete(
    h: &Harness,
    c: &CampaignId,
    m: &mut Model,
    token: &Token,
    o: Outcome,
) -> Result<(), TestCaseError> {
    let ack = h
        .store
        .complete(c, o.clone(), h.now())
        .await
        .map_err(store_err("complete"))?;
    m.acked(Sent::Complete(Box::new(o)), token, ack)
}

/// Renews `tokens` and checks each answer against the model: renewed while the lease holds
/// (even past its deadline) unless the trial already counted; lost only once reaped,
/// superseded, revoked or past the hard deadline.
pub(super) async fn renew(
    h: &Harness,
    c: &CampaignId,
    m: &mut Model,
    tokens: Vec<Token>,
    phase: Phase,
) -> Result<Vec<(Token, RenewState)>, TestCaseError> {
    let now = h.now();
    let ask: Vec<(Token, Phase)> = tokens.into_iter().map(|t| (t, phase)).collect();
    let answers = h
        .store
        .renew(c, ask.clone(), now)
        .await
        .map_err(store_err("renew"))?;
    prop_assert_eq!(answers.len(), ask.len(), "one answer per token");
    for ((asked, _), (token, state)) in ask.iter().zip(&answers) {
        prop_assert_eq!(asked, token, "answers in request order");
        let won = m.has_winner(token);
        let view = m.leases.get_mut(token).expect("renewed tokens were issued");
        match state {
            RenewState::Renewed => {
                prop_assert!(!won, "{} renewed after its trial counted", token);
                prop_assert!(
                    now <= view.hard_deadline_ms,
                    "{} renewed past its hard deadline",
                    token
                );
                view.deadline_ms = (now + LEASE_TTL_S * 1000).min(view.hard_deadline_ms);
                view.phase = phase;
            }
            RenewState::Lost => {
                let past_hard = now > view.hard_deadline_ms;
                let rows = h.rows(c).await;
                let has_row = rows
                    .iter()
                    .any(|r| r.trial_id == token.trial_id && r.attempt == token.attempt);
                let counted = rows
                    .iter()
                    .any(|r| r.trial_id == token.trial_id && r.counted);
                prop_assert!(
                    has_row || counted || past_hard,
                    "{} answered lost while its lease holds ({:?}, now {})",
                    token,
                    view,
                    now
                );
            }
            RenewState::Cancel => return Err(fail(format!("{token}: cancel without a stop"))),
        }
    }
    Ok(answers)
}
