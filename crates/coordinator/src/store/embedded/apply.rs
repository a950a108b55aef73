//! What the writer does with each operation in its transaction: a campaign's operations go
//! to the engine; a delete and the store-wide values (the lease key, login codes, task
//! folders) are written here, on the raw tables.

use lanes_common::ids::CampaignId;
use lanes_common::lease::LeaseKey;

use super::redb_tx::RedbTx;
use super::{BUNDLES, LEASE_KEY, LOGIN_CODE, LOGIN_SWEEP, SECRETS, backend, corrupt, login_key};
use crate::store::api::{LoginGrant, StoreError};
use crate::store::engine;
use crate::store::op::{Answer, Op};
use crate::store::tx::{R, Tx};

/// Runs `op` in `tx`: its writes count only if it answers `Ok`.
pub(super) fn apply(tx: &mut RedbTx<'_, '_>, op: &Op) -> R<Answer> {
    match op {
        Op::Campaign(op) => ready(engine::run(tx, op)),
        Op::Delete { campaign } => delete(tx, campaign).map(Answer::Deleted),
        Op::LeaseKey { fresh } => lease_key(tx, fresh).map(Answer::LeaseKey),
        Op::PutLoginCode { digest, grant, now } => {
            if grant.expires_ms > *now {
                put_login_code(tx, digest, grant, *now)?;
            }
            Ok(Answer::Done)
        }
        Op::TakeLoginCode { digest, now } => {
            let k = login_key(digest);
            let Some(bytes) = tx.get_raw(SECRETS, &k)? else {
                return Ok(Answer::Grant(None));
            };
            tx.del(SECRETS, &k)?;
            let grant: LoginGrant = serde_json::from_slice(&bytes).map_err(corrupt)?;
            Ok(Answer::Grant((grant.expires_ms > *now).then_some(grant)))
        }
        Op::PutBundle { digest, encoded } => {
            if tx.get_raw(BUNDLES, digest.as_bytes())?.is_some() {
                return Ok(Answer::Stored(false));
            }
            tx.put_raw(BUNDLES, digest.as_bytes(), encoded)?;
            Ok(Answer::Stored(true))
        }
        Op::Rows { .. }
        | Op::Events { .. }
        | Op::List
        | Op::MissingBundles { .. }
        | Op::Bundle { .. }
        | Op::Ping => Err(backend("a read of committed data reached the writer")),
    }
}

fn delete(tx: &mut RedbTx<'_, '_>, c: &CampaignId) -> R<crate::store::api::Deleted> {
    let meta = ready(tx.meta())?.ok_or_else(|| StoreError::UnknownCampaign(c.clone()))?;
    let deleted = engine::deletable(&meta, c)?;
    tx.delete_campaign()?;
    Ok(deleted)
}

/// The stored key, or `fresh` kept as the key if none is there.
fn lease_key(tx: &mut RedbTx<'_, '_>, fresh: &LeaseKey) -> R<LeaseKey> {
    match tx.get_raw(SECRETS, LEASE_KEY)? {
        Some(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(LeaseKey::from_hex)
            .ok_or_else(|| corrupt("the stored lease key is not 32 bytes of hex")),
        None => {
            tx.put_raw(SECRETS, LEASE_KEY, fresh.to_hex().as_bytes())?;
            Ok(fresh.clone())
        }
    }
}

fn put_login_code(
    tx: &mut RedbTx<'_, '_>,
    digest: &[u8; 32],
    grant: &LoginGrant,
    now: i64,
) -> R<()> {
    let value = serde_json::to_vec(grant).map_err(backend)?;
    // Codes nobody used are swept here, a few per new one, so they never pile up.
    for (k, v) in tx.scan_prefix(SECRETS, LOGIN_CODE, LOGIN_SWEEP)? {
        let expired =
            serde_json::from_slice::<LoginGrant>(&v).map_or(true, |g| g.expires_ms <= now);
        if expired {
            tx.del(SECRETS, &[LOGIN_CODE, &k].concat())?;
        }
    }
    tx.put_raw(SECRETS, &login_key(digest), &value)
}

/// Runs a future that never waits: the engine over a redb transaction does only blocking
/// work, so its future is ready at the first poll.
pub(super) fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => unreachable!("a redb transaction never waits"),
    }
}
