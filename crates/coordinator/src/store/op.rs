//! Every store operation as a value, and its answer as a value. A backend implements one
//! method, [`Store::execute`](super::Store::execute), over [`Op`]; the typed methods of
//! [`Store`](super::Store) are thin wrappers that build an `Op` and unwrap its [`Answer`]. So
//! a wrapper (timing, counting, holding) wraps one method, and the operations can queue as
//! values for group commit ([`group`](super::group)).

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::lease::LeaseKey;
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::api::*;
use crate::metrics::StoreOp;

/// An operation on one campaign's keys that the engine runs in one transaction: its writes
/// commit together or not at all.
#[derive(Debug, Clone)]
pub enum CampaignOp {
    Submit {
        campaign: Box<Campaign>,
        now: EpochMs,
    },
    Claim {
        campaign: CampaignId,
        req: ClaimRequest,
        now: EpochMs,
    },
    Renew {
        campaign: CampaignId,
        tokens: Vec<(Token, Phase)>,
        now: EpochMs,
    },
    Forfeit {
        campaign: CampaignId,
        worker: String,
        tokens: Vec<Token>,
        now: EpochMs,
    },
    Complete {
        campaign: CampaignId,
        outcome: Box<Outcome>,
        now: EpochMs,
    },
    Release {
        campaign: CampaignId,
        release: Release,
        now: EpochMs,
    },
    Reap {
        campaign: CampaignId,
        now: EpochMs,
    },
    Stop {
        campaign: CampaignId,
        mode: StopMode,
        now: EpochMs,
    },
    Status {
        campaign: CampaignId,
        now: EpochMs,
    },
    Requeue {
        campaign: CampaignId,
        req: RequeueRequest,
        now: EpochMs,
    },
    Spec {
        campaign: CampaignId,
    },
    Campaign {
        campaign: CampaignId,
    },
}

/// One store operation: what [`Store::execute`](super::Store::execute) takes.
#[derive(Debug, Clone)]
pub enum Op {
    /// A transition (or a consistent read) of one campaign, run by the engine.
    Campaign(CampaignOp),
    /// Deletes a campaign that runs nothing, every key of it at once.
    Delete {
        campaign: CampaignId,
    },
    /// Committed ledger rows with `seq >= from`, at most `limit`.
    Rows {
        campaign: CampaignId,
        from: u64,
        limit: usize,
    },
    /// Committed events with `seq >= from`, at most `limit`.
    Events {
        campaign: CampaignId,
        from: u64,
        limit: usize,
    },
    /// Every campaign id.
    List,
    /// The store-wide lease key (`fresh` is kept unless one is there).
    LeaseKey {
        fresh: LeaseKey,
    },
    PutLoginCode {
        digest: [u8; 32],
        grant: LoginGrant,
        now: EpochMs,
    },
    TakeLoginCode {
        digest: [u8; 32],
        now: EpochMs,
    },
    MissingBundles {
        digests: Vec<String>,
    },
    PutBundle {
        digest: String,
        encoded: Vec<u8>,
    },
    Bundle {
        digest: String,
    },
    Ping,
}

impl CampaignOp {
    /// The campaign whose keys it uses.
    pub fn campaign(&self) -> &CampaignId {
        match self {
            Self::Submit { campaign, .. } => &campaign.spec.id,
            Self::Claim { campaign, .. }
            | Self::Renew { campaign, .. }
            | Self::Forfeit { campaign, .. }
            | Self::Complete { campaign, .. }
            | Self::Release { campaign, .. }
            | Self::Reap { campaign, .. }
            | Self::Stop { campaign, .. }
            | Self::Status { campaign, .. }
            | Self::Requeue { campaign, .. }
            | Self::Spec { campaign }
            | Self::Campaign { campaign } => campaign,
        }
    }

    pub fn kind(&self) -> StoreOp {
        match self {
            Self::Submit { .. } => StoreOp::Submit,
            Self::Claim { .. } => StoreOp::Claim,
            Self::Renew { .. } => StoreOp::Renew,
            Self::Forfeit { .. } => StoreOp::Forfeit,
            Self::Complete { .. } => StoreOp::Complete,
            Self::Release { .. } => StoreOp::Release,
            Self::Reap { .. } => StoreOp::Reap,
            Self::Stop { .. } => StoreOp::Stop,
            Self::Status { .. } => StoreOp::Status,
            Self::Requeue { .. } => StoreOp::Requeue,
            Self::Spec { .. } => StoreOp::Spec,
            Self::Campaign { .. } => StoreOp::Campaign,
        }
    }

    /// The attempts whose token records it reads (a backend may read them ahead).
    pub(crate) fn tokens(&self) -> Vec<(TrialId, u32)> {
        let of = |t: &Token| (t.trial_id.clone(), t.attempt);
        match self {
            Self::Renew { tokens, .. } => tokens.iter().map(|(t, _)| of(t)).collect(),
            Self::Forfeit { tokens, .. } => tokens.iter().map(of).collect(),
            Self::Complete { outcome, .. } => vec![of(&outcome.token)],
            Self::Release { release, .. } => vec![of(&release.token)],
            _ => Vec::new(),
        }
    }
}

impl Op {
    /// What the store metrics call it.
    pub fn kind(&self) -> StoreOp {
        match self {
            Self::Campaign(op) => op.kind(),
            Self::Delete { .. } => StoreOp::Delete,
            Self::Rows { .. } => StoreOp::Rows,
            Self::Events { .. } => StoreOp::Events,
            Self::List => StoreOp::List,
            Self::LeaseKey { .. } => StoreOp::LeaseKey,
            Self::PutLoginCode { .. } | Self::TakeLoginCode { .. } => StoreOp::LoginCode,
            Self::MissingBundles { .. } | Self::PutBundle { .. } | Self::Bundle { .. } => {
                StoreOp::Bundle
            }
            Self::Ping => StoreOp::Ping,
        }
    }
}

impl From<CampaignOp> for Op {
    fn from(op: CampaignOp) -> Self {
        Self::Campaign(op)
    }
}

/// Declares [`Answer`], one variant per answer type, and how each type is taken out of it.
macro_rules! answers {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// What an [`Op`] answers.
        #[derive(Debug, Clone)]
        pub enum Answer {
            $($variant($ty),)*
            /// Done, with nothing to say.
            Done,
        }

        $(impl Answered for $ty {
            fn from_answer(answer: Answer) -> Result<Self, StoreError> {
                match answer {
                    Answer::$variant(v) => Ok(v),
                    other => Err(mismatch(&other)),
                }
            }
        })*
    };
}

answers! {
    Submitted(Submitted),
    Claim(ClaimOutcome),
    Renewed(Vec<(Token, RenewState)>),
    Forfeited(Vec<Token>),
    Ack(CompleteAck),
    Reaped(ReapReport),
    State(CampaignState),
    Status(CampaignStatus),
    Requeued(Requeued),
    Spec(Box<CampaignSpec>),
    Campaign(Box<Campaign>),
    Deleted(Deleted),
    Rows(Vec<Row>),
    Events(Vec<Event>),
    Campaigns(Vec<CampaignId>),
    LeaseKey(LeaseKey),
    Grant(Option<LoginGrant>),
    Missing(Vec<String>),
    Stored(bool),
    Bundle(Option<Vec<u8>>),
}

/// A type an [`Answer`] carries.
pub trait Answered: Sized {
    fn from_answer(answer: Answer) -> Result<Self, StoreError>;
}

impl Answered for () {
    fn from_answer(answer: Answer) -> Result<Self, StoreError> {
        match answer {
            Answer::Done => Ok(()),
            other => Err(mismatch(&other)),
        }
    }
}

impl Answer {
    /// The answer as the type its operation answers; another kind of answer is a bug of the
    /// backend, reported as a backend error.
    pub fn into_typed<T: Answered>(self) -> Result<T, StoreError> {
        T::from_answer(self)
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Submitted(_) => "submitted",
            Self::Claim(_) => "claim",
            Self::Renewed(_) => "renewed",
            Self::Forfeited(_) => "forfeited",
            Self::Ack(_) => "ack",
            Self::Reaped(_) => "reaped",
            Self::State(_) => "state",
            Self::Status(_) => "status",
            Self::Requeued(_) => "requeued",
            Self::Spec(_) => "spec",
            Self::Campaign(_) => "campaign",
            Self::Deleted(_) => "deleted",
            Self::Rows(_) => "rows",
            Self::Events(_) => "events",
            Self::Campaigns(_) => "campaigns",
            Self::LeaseKey(_) => "lease key",
            Self::Grant(_) => "grant",
            Self::Missing(_) => "missing",
            Self::Stored(_) => "stored",
            Self::Bundle(_) => "bundle",
            Self::Done => "done",
        }
    }
}

/// An operation answered with another operation's kind of answer: a bug of the backend.
fn mismatch(answer: &Answer) -> StoreError {
    StoreError::Backend(format!(
        "the store answered with the wrong kind of answer ({})",
        answer.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_unwraps_to_its_own_type_and_no_other() {
        assert!(Answer::Stored(true).into_typed::<bool>().unwrap());
        assert_eq!(Answer::Done.into_typed::<()>().unwrap(), ());
        let e = Answer::Stored(true).into_typed::<Vec<Row>>().unwrap_err();
        assert!(
            e.to_string().contains("wrong kind of answer (stored)"),
            "{e}"
        );
        assert!(Answer::Done.into_typed::<bool>().is_err());
    }

    #[test]
    fn each_operation_names_its_campaign_and_its_metric() {
        let c = CampaignId::new("c1").unwrap();
        let op = CampaignOp::Reap {
            campaign: c.clone(),
            now: 0,
        };
        assert_eq!(op.campaign(), &c);
        assert_eq!(Op::from(op).kind(), StoreOp::Reap);
        assert_eq!(Op::List.kind(), StoreOp::List);
        assert_eq!(
            Op::TakeLoginCode {
                digest: [0; 32],
                now: 0
            }
            .kind(),
            StoreOp::LoginCode
        );
    }
}
