//! `lanes store migrate` on Redis: upgrades a store in place, step by step, from any older
//! layout to [`REDIS_LAYOUT`], then records the new layout.
//!
//! Layout 1 -> 2: each campaign's `meta` (the whole meta as one JSON value) is split into the
//! parts layout 2 stores (see `meta.rs`): the meta's remaining fields, `spec`, the
//! `stat:*` lists and `seen`, written exactly as a layout 2 commit writes them.
//!
//! Layout 2 -> 3: nothing is rewritten. Layout 3 writes one stream entry per commit and stream
//! (its items under their seqs) where layout 2 wrote one per item; a layout 3 coordinator
//! reads layout 2's entries as they are (`stream.rs`). The step only records the layout, so
//! that a layout 2 coordinator started afterwards, which cannot read the new entries, refuses
//! the store. Unlike step 1 -> 2 it does not detect one left running: that one's writes stay
//! in order, but its ledger reads fail as corrupt once new entries exist.
//!
//! Layout 3 -> 4: nothing is rewritten either. Layout 4 packs a stream entry's items into one
//! compressed field (`packed.rs`) where layout 3 stored each under its seq; a layout 4
//! coordinator reads layout 3's entries as they are, and the step records the layout so that
//! a layout 3 coordinator refuses the store. It does not detect one left running either.
//!
//! Layout 4 -> 5: nothing is rewritten either. Layout 5 stores trial states, leases, token
//! records and block states in a binary encoding (`hot_record.rs`) where layout 4 stored JSON; a
//! layout 5 coordinator reads both, so records stay JSON until a commit writes them again.
//! The step records the layout so that a layout 4 coordinator refuses the store; one left
//! running fails (`corrupt`) on the first binary record it reads, and writes only JSON, which
//! a layout 5 coordinator reads.
//!
//! Layout 5 -> 6: nothing is rewritten either. Layout 6 keeps a trial's lease and token records
//! in its record in `trials` (`tx/fold.rs`) where layout 5 kept them in the `leases` and
//! `tokens` hashes; a layout 6 coordinator reads a trial stored either way, and the first
//! commit that writes a trial stored apart moves its lease and token records into its record.
//! The step records the layout so that a layout 5 coordinator refuses the store. It does not
//! detect one left running, and that one does harm: an operation that reads a trial (a claim,
//! an outcome) fails on a folded record (`corrupt`), but its renewals and its reaper read only
//! the `leases` hash, where a folded lease is absent, so it answers those lanes' renewals as
//! lost and drops their leases' deadline entries (such a lease is then never reaped).
//!
//! # A coordinator running meanwhile
//! Coordinators must be stopped first: an old one cannot read the new layout, and a new one
//! refuses the store until the migration recorded its layout, which is written last. What
//! the migration cannot prevent it detects, so that an old coordinator left running fails
//! its operations instead of corrupting data: each campaign is rewritten by one script,
//! under the campaign lock, only if the campaign version is still the one read, and the
//! script bumps that version, so a commit prepared against the old layout conflicts (then its
//! retry cannot read the new meta and writes nothing). A campaign locked for longer than
//! [`LOCK_WAIT`], a campaign written during its rewrite, or a campaign submitted during the
//! migration stops the migration with an error, before the layout is recorded; running it
//! again (coordinators stopped) finishes it, leaving the campaigns already rewritten as they
//! are.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::commit::nonce;
use super::conn::Conn;
use super::keys::{CAMPAIGNS, Keys};
use super::meta::{Part, parts};
use super::{layout, layout::LAYOUT_KEY};
use super::{redis_err, try_lock, unlock};
use crate::store::api::StoreError;
use crate::store::layout::{LayoutError, MigrationReport, REDIS_LAYOUT, StoreAt};
use crate::store::model::Meta;
use crate::store::tx::R;

/// How long the migration holds a campaign's lock at most (the script releases it).
const LOCK_TTL_MS: u64 = 30_000;
/// How long the migration waits for a campaign lock a coordinator holds.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// A campaign's state with respect to one migration step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Listed but never committed: no meta, nothing to rewrite.
    Absent,
    /// In the step's old layout.
    Old,
    /// Already in the new layout (an interrupted migration rewrote it).
    New,
}

fn still_running(what: String) -> StoreError {
    StoreError::Backend(format!(
        "{what}: a coordinator is still running on this store; stop every coordinator and run \
         the migration again (campaigns already migrated are kept)"
    ))
}

/// Upgrades the store to [`REDIS_LAYOUT`]; with `dry_run`, only says what it would do.
pub(crate) async fn run(conn: &mut Conn, at: StoreAt, dry_run: bool) -> R<MigrationReport> {
    let recorded = layout::recorded(conn).await?;
    let mut report = MigrationReport {
        store: at,
        recorded,
        to: REDIS_LAYOUT,
        migrated: Vec::new(),
        already: 0,
        dry_run,
    };
    let Some(from) = recorded.layout() else {
        if !dry_run {
            let stored = layout::stamp(conn, REDIS_LAYOUT).await?;
            if let Some(e) = LayoutError::check(&report.store, stored, REDIS_LAYOUT) {
                return Err(e.into());
            }
        }
        return Ok(report);
    };
    if from > REDIS_LAYOUT {
        return Err(LayoutError::Newer {
            store: report.store,
            found: from,
            current: REDIS_LAYOUT,
        }
        .into());
    }
    let mut layout = from;
    while layout < REDIS_LAYOUT {
        match layout {
            1 => v1_to_v2(conn, &mut report).await?,
            // Older stream entries, JSON records and records kept apart stay readable:
            // nothing to rewrite.
            2..=5 => {}
            other => {
                return Err(StoreError::Corrupt(format!(
                    "{LAYOUT_KEY} is {other}, a layout no migration starts from"
                )));
            }
        }
        layout += 1;
        if !dry_run {
            layout::record(conn, layout).await?;
        }
    }
    Ok(report)
}

async fn listed(conn: &mut Conn) -> R<BTreeSet<String>> {
    redis::cmd("SMEMBERS")
        .arg(CAMPAIGNS)
        .query_async(conn)
        .await
        .map_err(redis_err)
}

/// Whether a `meta` value is layout 1's (the whole meta, with its spec) or layout 2's.
fn v1_form(meta: Option<&[u8]>) -> R<Form> {
    let Some(bytes) = meta else {
        return Ok(Form::Absent);
    };
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("campaign meta: {e}")))?;
    Ok(if value.get("spec").is_some() {
        Form::Old
    } else {
        Form::New
    })
}

/// Layout 1 -> 2, every listed campaign, then a check that no campaign appeared meanwhile.
async fn v1_to_v2(conn: &mut Conn, report: &mut MigrationReport) -> R<()> {
    let before = listed(conn).await?;
    for id in &before {
        let keys = Keys::new(id);
        let meta: Option<Vec<u8>> = redis::cmd("GET")
            .arg(keys.meta())
            .query_async(conn)
            .await
            .map_err(redis_err)?;
        match v1_form(meta.as_deref())? {
            Form::Absent => {}
            Form::New => report.already += 1,
            Form::Old if report.dry_run => report.migrated.push(id.clone()),
            Form::Old => {
                if rewrite_v1(conn, id, &keys).await? {
                    report.migrated.push(id.clone());
                } else {
                    report.already += 1;
                }
            }
        }
    }
    if !report.dry_run {
        let after = listed(conn).await?;
        if let Some(new) = after.difference(&before).next() {
            return Err(still_running(format!(
                "campaign {new} was submitted during the migration"
            )));
        }
    }
    Ok(())
}

/// Rewrites one campaign from layout 1 to 2 under its lock; `false` when it turned out to be
/// in layout 2 already.
async fn rewrite_v1(conn: &mut Conn, id: &str, keys: &Keys) -> R<bool> {
    let token = lock(conn, id, keys).await?;
    let done = rewrite_locked(conn, id, keys, &token).await;
    // The script released the lock if it wrote; otherwise it is released here.
    unlock(conn, keys, &token).await;
    done
}

async fn rewrite_locked(conn: &mut Conn, id: &str, keys: &Keys, token: &str) -> R<bool> {
    let (version, meta): (Option<String>, Option<Vec<u8>>) = redis::pipe()
        .cmd("GET")
        .arg(keys.version())
        .cmd("GET")
        .arg(keys.meta())
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    let meta: Meta = match (v1_form(meta.as_deref())?, meta) {
        (Form::Old, Some(bytes)) => serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::Corrupt(format!("campaign {id}: layout 1 meta: {e}")))?,
        (Form::Old | Form::Absent | Form::New, _) => return Ok(false),
    };
    let script = redis::Script::new(include_str!("migrate.lua"));
    let mut call = script.prepare_invoke();
    call.key(keys.version()).key(keys.lock());
    call.arg(token).arg(version.unwrap_or_default());
    let mut n = 2;
    let mut seen = Vec::new();
    for part in parts(keys, None, &meta)? {
        match part {
            Part::Set(key, value) => {
                n += 1;
                call.key(key).arg("S").arg(n).arg(value);
            }
            Part::List { key, append, keep } => {
                // From nothing, a list is written whole: what a layout 2 commit appends.
                debug_assert_eq!(keep, append.len());
                n += 1;
                call.key(key).arg("L").arg(n).arg(append.len());
                for v in append {
                    // Formatted as the commit formats it (`f64` Display).
                    call.arg(v.to_string());
                }
            }
            Part::Seen(lane, at) => {
                if let Some(at) = at {
                    seen.push((lane, at));
                }
            }
        }
    }
    if !seen.is_empty() {
        n += 1;
        call.key(keys.seen()).arg("H").arg(n).arg(seen.len());
        for (lane, at) in seen {
            call.arg(lane).arg(at.to_string());
        }
    }
    let done: i64 = call.invoke_async(conn).await.map_err(redis_err)?;
    if done == 1 {
        Ok(true)
    } else {
        Err(still_running(format!(
            "campaign {id} was written during its migration"
        )))
    }
}

/// Takes the campaign lock, waiting up to [`LOCK_WAIT`] for a coordinator's to expire.
async fn lock(conn: &mut Conn, id: &str, keys: &Keys) -> R<String> {
    let token = format!("migrate-{}", nonce());
    let started = Instant::now();
    loop {
        if try_lock(conn, keys, &token, LOCK_TTL_MS).await? {
            return Ok(token);
        }
        if started.elapsed() > LOCK_WAIT {
            return Err(still_running(format!(
                "campaign {id} stayed locked for {LOCK_WAIT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
