//! Issues and checks lease secrets. The key is read from the store once per replica (and
//! created there by the first replica), so a secret issued by one replica verifies on any.

use std::sync::Arc;

use tokio::sync::OnceCell;

use lanes_common::ids::{AttemptTag, CampaignId, Token};
use lanes_common::lease::{KEY_BYTES, LeaseKey, LeaseSecret};
use lanes_common::proto as pb;

use crate::store::{Store, StoreError};

/// Why a message about a lease was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseRefused {
    /// The secret is missing or is not the one issued to this worker for this token.
    #[error(
        "permission denied: the lease secret of {attempt} does not match one issued to this worker"
    )]
    Denied { attempt: AttemptTag },
    /// The key could not be read: the store is down; the message may be sent again.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The replica's lease key, read lazily (the store may be down when the replica starts).
#[derive(Default)]
pub(crate) struct Leases {
    key: OnceCell<LeaseKey>,
}

fn fresh_key() -> Result<LeaseKey, StoreError> {
    let mut bytes = [0u8; KEY_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Backend(format!("no randomness for the lease key: {e}")))?;
    Ok(LeaseKey::from_bytes(bytes))
}

impl Leases {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(crate) async fn key(&self, store: &dyn Store) -> Result<&LeaseKey, StoreError> {
        self.key
            .get_or_try_init(|| async { store.lease_key(fresh_key()?).await })
            .await
    }

    /// Sets the secret of every trial of an assignment made for `worker`.
    pub(crate) async fn issue(
        &self,
        store: &dyn Store,
        worker: &str,
        a: &mut pb::Assignment,
    ) -> Result<(), StoreError> {
        let key = self.key(store).await?;
        let campaign = CampaignId::new(&a.campaign)
            .map_err(|e| StoreError::Corrupt(format!("assignment campaign: {e}")))?;
        for t in &mut a.trials {
            let Some(wire) = t.token.as_mut() else {
                continue;
            };
            let token = Token::try_from(wire.clone())
                .map_err(|e| StoreError::Corrupt(format!("assigned token: {e}")))?;
            wire.lease = key.secret(&campaign, &token, worker).expose().to_owned();
        }
        Ok(())
    }

    /// Whether `worker` holds the lease of `token` (it sent the secret issued to it).
    pub(crate) async fn check(
        &self,
        store: &dyn Store,
        campaign: &CampaignId,
        token: &Token,
        worker: &str,
        given: &LeaseSecret,
    ) -> Result<(), LeaseRefused> {
        let key = self.key(store).await?;
        if key.verify(campaign, token, worker, given) {
            Ok(())
        } else {
            Err(LeaseRefused::Denied {
                attempt: AttemptTag::new(campaign.clone(), token.clone()),
            })
        }
    }

    /// Preloads the key (so the first claim does not pay for it); failure is not fatal.
    pub(crate) async fn warm(&self, store: &dyn Store) {
        if let Err(e) = self.key(store).await {
            tracing::warn!(error = %e, "lease key not loaded yet; retried on first use");
        }
    }
}
