//! The next window of a ready queue, read while rounds run.
//!
//! Claims take units from the window of a ready queue their campaign's cache knows. A claim
//! that ran past it used to stop the campaign's pipeline: wait for the commits in flight, scan
//! the queue, read the new units' tasks, then their trials' records and blocks (at 2,048
//! units, ~9 ms in which the lanes of the campaign got no answer; docs/PERFORMANCE.md, "The
//! next window, read ahead"). Instead, once a window is half claimed, the round whose commit
//! was just sent asks for the next one ([`ask`]), and a read of its own, sent behind that
//! commit, fetches it while the next rounds run. The claim that runs past the window takes it
//! in ([`RedisTx::take_ahead`](super::tx::RedisTx)), or, if the read failed or saw another
//! version, scans the usual way.
//!
//! What makes a window exact:
//! - Its scan (members past the known region) and a read of the campaign's version go in one
//!   `MULTI`, so the members are those of one version. The window is used only if that version
//!   is the one the asking round's commit leaves: the scan then saw exactly that commit and
//!   every one before it. The read goes on the connection commits go on, right after the
//!   commit (the first poll hands it over), so it is normally served just after it; one served
//!   before it or after a later commit is dropped by that check.
//! - The scan starts past the last known member's score. In a ready queue a member's score is
//!   its position key, unique to it, so no member shares that score.
//! - The cache it belongs to is that round's, handed from round to round down the chain. Every
//!   write to the set those later rounds commit is logged with it (`ZKnown::add`, `rem`) and
//!   replayed when the window is taken in (`ZKnown::extend`). A chain that fails drops the
//!   cache, and the window with it.
//! - Its units' hash fields are read later than the scan, so they are taken in only where the
//!   cache holds nothing ([`Cache::absorb`]): every field a round of this chain wrote is in the
//!   cache, and a trim, which drops fields, drops the windows being read too.
//!
//! A window asked for and never taken (a campaign gone idle) stays with its cache, at most one
//! per ready queue, until the cache goes.

use tokio::sync::oneshot;

use super::cache::{Cache, Known, Score};
use super::conn::{Conn, hand_over};
use super::keys::Keys;
use super::redis_err;
use super::tx::{RedisTx, scan_size};
use crate::store::model::{Meta, Queue, Unit};
use crate::store::tx::R;

/// A window being read: its answer, and the committed writes past the known region since it
/// was asked for (member, and its score if added, `None` if removed), in order.
#[derive(Debug)]
pub(crate) struct Ahead {
    pub(crate) window: oneshot::Receiver<Window>,
    pub(crate) log: Vec<(String, Option<f64>)>,
}

/// A window as read: its members past the region known when it was asked for, in order, known
/// up to `known`, from a scan that asked for `fetched`; and its units' tasks, trials' records
/// and blocks, read ahead into a cache of their own.
#[derive(Debug)]
pub(crate) struct Window {
    pub(crate) members: Vec<(String, f64)>,
    pub(crate) known: Known,
    pub(crate) fetched: usize,
    pub(crate) read: Cache,
}

/// Asks for the next window of each ready queue of `cache` (the cache a round whose commit
/// was just sent leaves) that is half claimed, with more past it, and none asked for yet.
/// Each read is polled once here, which normally hands its first request to the connection
/// behind that commit and ahead of the next round's.
pub(crate) async fn ask(conn: &Conn, campaign: &str, cache: &mut Cache) {
    let Some(Some(meta)) = &cache.meta else {
        return;
    };
    // Most rounds ask for nothing: the campaign's keys are named only for a set that qualifies.
    let due: Vec<(&String, f64, usize)> = cache
        .zsets()
        .filter(|(_, z)| z.ahead.is_none() && z.scores.len() * 2 <= z.fetched)
        .filter_map(|(key, z)| match z.known {
            Known::Until(Score(after), _) => Some((key, after, z.fetched)),
            Known::Through(_) => None,
        })
        .collect();
    if due.is_empty() {
        return;
    }
    let keys = Keys::new(campaign);
    let prefix = keys.ready_prefix();
    let members = cache.members();
    let asks: Vec<(String, Unit, f64, usize)> = due
        .into_iter()
        .filter_map(|(key, after, fetched)| {
            let queue = key.strip_prefix(prefix.as_str())?.parse::<Queue>().ok()?;
            let size = scan_size(0, 0, Some(fetched), members);
            Some((key.clone(), queue.unit(), after, size))
        })
        .collect();
    if asks.is_empty() {
        return;
    }
    let meta = meta.clone();
    for (key, unit, after, size) in asks {
        let (answer, window) = oneshot::channel();
        let read = read(
            conn.behind_writes(),
            keys.clone(),
            Scan {
                key: key.clone(),
                after,
                size,
                unit,
            },
            cache.version.clone(),
            meta.clone(),
        );
        let mut read = Box::pin(async move {
            // A read that failed, or saw another version, answers nothing: the claim that
            // runs past the window then scans the usual way.
            if let Ok(Some(w)) = read.await {
                let _ = answer.send(w);
            }
        });
        if hand_over(&mut read).await.is_pending() {
            tokio::spawn(read);
        }
        if let Some(z) = cache.zset_mut(&key) {
            z.ahead = Some(Ahead {
                window,
                log: Vec::new(),
            });
        }
    }
}

/// Which window to read: members of the ready queue at `key` (of `unit`s) scored past
/// `after`, at most `size`.
struct Scan {
    key: String,
    after: f64,
    size: usize,
    unit: Unit,
}

/// Reads a window at `version`, or `None` if the scan saw another one.
async fn read(
    mut conn: Conn,
    keys: Keys,
    scan: Scan,
    version: String,
    meta: Meta,
) -> R<Option<Window>> {
    let (stored, members): (Option<String>, Vec<String>) = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(keys.version())
        .cmd("ZRANGEBYSCORE")
        .arg(&scan.key)
        .arg(format!("({}", scan.after))
        .arg("+inf")
        .arg("LIMIT")
        .arg(0)
        .arg(scan.size)
        .query_async(&mut conn)
        .await
        .map_err(redis_err)?;
    if stored.as_deref().unwrap_or("0") != version {
        return Ok(None);
    }
    // A ready entry's score is its key.
    let Ok(units) = members
        .iter()
        .map(|m| m.parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
    else {
        return Ok(None);
    };
    let known = match (members.last(), units.last()) {
        (Some(m), Some(k)) if members.len() >= scan.size => {
            Known::Until(Score(*k as f64), m.clone())
        }
        _ => Known::Through(f64::INFINITY),
    };
    let mut read = Cache::at(version);
    read.meta = Some(Some(meta));
    let mut tx = RedisTx::new(conn, keys, read, String::new());
    tx.read_ahead_units(scan.unit, &units).await?;
    let mut read = tx.into_read();
    read.meta = None;
    Ok(Some(Window {
        members: members
            .into_iter()
            .zip(units)
            .map(|(m, k)| (m, k as f64))
            .collect(),
        known,
        fetched: scan.size,
        read,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::redis::{RedisOptions, RedisStore};
    use crate::store::tx::Tx;
    use lanes_tests::redis_server::RedisServer;

    /// A window is read past the region the cache knows, with its units' tasks and records,
    /// at the version it was asked at; at any other version it answers nothing.
    #[tokio::test]
    async fn a_window_is_read_at_its_version_and_no_other() {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .unwrap();
        let mut text = "id = \"ahead\"\nphase1_runs = 1\nschedule_seed = 1\npairing = \"none\"\n\
                        [[arms]]\nid = \"a\"\n[driver]\nsim = {}\n[tasks]\nitems = [\n"
            .to_string();
        for i in 0..600 {
            text.push_str(&format!("{{ id = \"t{i}\" }},\n"));
        }
        text.push_str("]\n");
        let campaign = lanes_common::spec::load_str(
            &text,
            std::path::Path::new("ahead.toml"),
            std::path::Path::new("."),
        )
        .unwrap();
        store.submit(campaign, 0).await.unwrap();
        let mut tx = store.begin("ahead", false, None).await.unwrap();
        let meta = tx.meta().await.unwrap().expect("the campaign");
        let queue = tx.queues().await.unwrap().remove(0);
        // The first scan knows the lowest 256 units.
        let first = tx.ready_first(&queue, 1).await.unwrap()[0];
        let keys = Keys::new("ahead");
        let key = keys.ready(&queue);
        let version = tx.version().to_owned();
        let z = tx.into_read();
        let Known::Until(Score(after), _) = z.zset(&key).unwrap().known else {
            panic!("a window of 256 of 600 units");
        };
        let scan = |size| Scan {
            key: key.clone(),
            after,
            size,
            unit: queue.unit(),
        };
        let conn = store.conn.clone();
        let w = read(conn.clone(), keys.clone(), scan(300), version, meta.clone())
            .await
            .unwrap()
            .expect("read at its version");
        assert_eq!(w.members.len(), 300);
        assert!(
            w.members
                .iter()
                .all(|(_, s)| *s > after && *s > first as f64)
        );
        assert!(matches!(w.known, Known::Until(Score(s), _) if s == w.members[299].1));
        let (_, tp, _, _) = lanes_common::schedule::from_position_key(w.members[0].1 as u64);
        let task = w.read.task(tp).expect("its units' tasks, read ahead");
        let trial = lanes_common::ids::TrialId::from_parts(&task.id, 0, &meta.spec.arms[0].id);
        // A trial never claimed has no record: known absent, not unknown.
        assert!(
            w.read.field(&keys.trials(), trial.as_str()).is_some(),
            "and their trials' records"
        );
        // The other 344 units: the whole rest of the queue.
        let rest = read(
            conn.clone(),
            keys.clone(),
            scan(600),
            "1:0".into(),
            meta.clone(),
        );
        assert!(rest.await.unwrap().is_none(), "another version");
        let stored: String = redis::cmd("GET")
            .arg(keys.version())
            .query_async(&mut conn.clone())
            .await
            .unwrap();
        let w = read(conn, keys, scan(600), stored, meta)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w.members.len(), 600 - 256);
        assert_eq!(w.known, Known::Through(f64::INFINITY));
    }
}
