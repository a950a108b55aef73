//! A transaction's buffered writes, with savepoints: a round runs several operations in one
//! transaction, and one that fails is rolled back to where it started without touching the
//! others' writes. A transaction that never takes a savepoint (an operation that runs
//! alone, such as a submit) keeps no undo log: it is committed or dropped whole. For a
//! 1M-trial submit the log held a key and a member string per ready-queue entry, more than
//! the entries themselves.

use std::collections::BTreeSet;
use std::sync::Arc;

// foldhash, as in the cache: hashed many times per operation, seeded per process.
use foldhash::{HashMap, HashSet};

use crate::store::api::Event;
use crate::store::model::{Meta, Queue};

/// Pending changes to one sorted set.
#[derive(Debug, Default, Clone)]
pub(crate) struct ZOverlay {
    pub(crate) added: HashMap<String, f64>,
    pub(crate) removed: HashSet<String>,
}

/// What a member was in an overlay before a write.
#[derive(Debug)]
enum ZWas {
    Untouched,
    Added(f64),
    Removed,
}

/// How to take one write back.
#[derive(Debug)]
enum Undo {
    Meta(Option<Box<Meta>>),
    Hash {
        key: String,
        field: String,
        was: Option<Option<Vec<u8>>>,
    },
    Z {
        key: String,
        member: String,
        was: ZWas,
    },
    Queue(Queue),
    Streams(usize),
    Scored(usize),
    Bulk(usize),
    Events(usize),
}

/// The write set of a transaction.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    pub(crate) meta: Option<Box<Meta>>,
    pub(crate) hashes: HashMap<String, HashMap<String, Option<Vec<u8>>>>,
    pub(crate) zsets: HashMap<String, ZOverlay>,
    pub(crate) queues_added: BTreeSet<Queue>,
    /// (stream key, item seq, body): the commit writes each stream's items of a round as one
    /// entry (see `commit.rs`).
    pub(crate) streams: Vec<(Arc<str>, u64, Vec<u8>)>,
    /// (trial, attempt) of counted rows: first scored wins, checked by the commit script.
    pub(crate) scored: Vec<(String, String)>,
    /// New tasks (position, JSON, id), staged in chunks before the commit and merged by the
    /// commit script, so they are invisible to every other transaction until then.
    pub(crate) bulk_tasks: Vec<(u32, Vec<u8>, String)>,
    /// Ready-queue entries added before any savepoint (a submit's), by sorted-set key, kept
    /// as numbers: an entry's member is its key in decimal and its score the key itself. A
    /// million of them take 8 MB here, ~100 MB as strings in `zsets`. They are folded into
    /// `zsets` before their set is read or written otherwise, and staged from here.
    pub(crate) ready_bulk: HashMap<String, Vec<u64>>,
    /// The events written (in `streams` too), for the commit observer once committed.
    pub(crate) events: Vec<Event>,
    undo: Vec<Undo>,
    /// Whether writes are logged for a rollback: from the first savepoint on.
    undoing: bool,
}

/// Where a savepoint was taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Savepoint(usize);

impl Writes {
    /// From here on, writes can be taken back to this point.
    pub(crate) fn savepoint(&mut self) -> Savepoint {
        // Numeric entries are only for transactions without savepoints.
        let keys: Vec<String> = self.ready_bulk.keys().cloned().collect();
        for key in keys {
            self.fold_ready(&key);
        }
        self.undoing = true;
        Savepoint(self.undo.len())
    }

    fn log(&mut self, undo: impl FnOnce() -> Undo) {
        if self.undoing {
            self.undo.push(undo());
        }
    }

    /// Takes back every write since `sp`, newest first.
    pub(crate) fn rollback(&mut self, sp: Savepoint) {
        while self.undo.len() > sp.0 {
            match self.undo.pop().expect("len checked") {
                Undo::Meta(was) => self.meta = was,
                Undo::Hash { key, field, was } => {
                    let h = self.hashes.entry(key).or_default();
                    match was {
                        Some(v) => h.insert(field, v),
                        None => h.remove(&field),
                    };
                }
                Undo::Z { key, member, was } => {
                    let z = self.zsets.entry(key).or_default();
                    z.added.remove(&member);
                    z.removed.remove(&member);
                    match was {
                        ZWas::Untouched => {}
                        ZWas::Added(s) => {
                            z.added.insert(member, s);
                        }
                        ZWas::Removed => {
                            z.removed.insert(member);
                        }
                    }
                }
                Undo::Queue(q) => {
                    self.queues_added.remove(&q);
                }
                Undo::Streams(n) => self.streams.truncate(n),
                Undo::Scored(n) => self.scored.truncate(n),
                Undo::Bulk(n) => self.bulk_tasks.truncate(n),
                Undo::Events(n) => self.events.truncate(n),
            }
        }
    }

    /// Whether nothing is buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.meta.is_none()
            && self.hashes.values().all(HashMap::is_empty)
            && self
                .zsets
                .values()
                .all(|z| z.added.is_empty() && z.removed.is_empty())
            && self.queues_added.is_empty()
            && self.streams.is_empty()
            && self.scored.is_empty()
            && self.bulk_tasks.is_empty()
            && self.events.is_empty()
            && self.ready_bulk.values().all(Vec::is_empty)
    }

    /// Adds a ready-queue entry (score = member = `entry`) to the set `key`.
    pub(crate) fn add_ready(&mut self, key: String, entry: u64) {
        let removed = self.zsets.get(&key).is_some_and(|z| !z.removed.is_empty());
        if self.undoing || removed {
            self.zadd(key, entry as f64, entry.to_string());
            return;
        }
        if !self.zsets.contains_key(&key) {
            // So the commit sees the set among the written ones.
            self.zsets.insert(key.clone(), ZOverlay::default());
        }
        self.ready_bulk.entry(key).or_default().push(entry);
    }

    /// Moves `key`'s numeric ready entries into `zsets`, as added members. Not logged: they
    /// were written before any savepoint, so no rollback reaches them.
    pub(crate) fn fold_ready(&mut self, key: &str) {
        if let Some(entries) = self.ready_bulk.remove(key) {
            let z = self.zsets.entry(key.to_owned()).or_default();
            for e in entries {
                z.added.insert(e.to_string(), e as f64);
            }
        }
    }

    /// Folds the sets with at most `max` pending entries (added and numeric together): only
    /// larger ones are staged.
    pub(crate) fn fold_ready_up_to(&mut self, max: usize) {
        let small: Vec<String> = self
            .ready_bulk
            .iter()
            .filter(|(k, v)| v.len() + self.zsets.get(*k).map_or(0, |z| z.added.len()) <= max)
            .map(|(k, _)| k.clone())
            .collect();
        for key in small {
            self.fold_ready(&key);
        }
    }

    pub(crate) fn set_meta(&mut self, meta: Meta) {
        let was = self.meta.replace(Box::new(meta));
        self.log(|| Undo::Meta(was));
    }

    /// A pending field write; `None` deletes it.
    pub(crate) fn hset(&mut self, key: String, field: String, value: Option<Vec<u8>>) {
        if !self.undoing {
            self.hashes.entry(key).or_default().insert(field, value);
            return;
        }
        let was = entry_of(&mut self.hashes, &key, || {
            HashMap::with_capacity_and_hasher(ROUND_FIELDS, Default::default())
        })
        .insert(field.clone(), value);
        self.undo.push(Undo::Hash { key, field, was });
    }

    fn z_was(&mut self, key: &str, member: &str) -> ZWas {
        self.fold_ready(key);
        let Some(z) = self.zsets.get(key) else {
            return ZWas::Untouched;
        };
        if let Some(s) = z.added.get(member) {
            ZWas::Added(*s)
        } else if z.removed.contains(member) {
            ZWas::Removed
        } else {
            ZWas::Untouched
        }
    }

    pub(crate) fn zadd(&mut self, key: String, score: f64, member: String) {
        if !self.undoing {
            self.fold_ready(&key);
            let z = self.zsets.entry(key).or_default();
            z.removed.remove(&member);
            z.added.insert(member, score);
            return;
        }
        let was = self.z_was(&key, &member);
        let z = entry_of(&mut self.zsets, &key, ZOverlay::default);
        z.removed.remove(&member);
        z.added.insert(member.clone(), score);
        self.undo.push(Undo::Z { key, member, was });
    }

    pub(crate) fn zrem(&mut self, key: String, member: String) {
        if !self.undoing {
            self.fold_ready(&key);
            let z = self.zsets.entry(key).or_default();
            z.added.remove(&member);
            z.removed.insert(member);
            return;
        }
        let was = self.z_was(&key, &member);
        let z = entry_of(&mut self.zsets, &key, ZOverlay::default);
        z.added.remove(&member);
        z.removed.insert(member.clone());
        self.undo.push(Undo::Z { key, member, was });
    }

    pub(crate) fn add_queue(&mut self, queue: &Queue) {
        if self.queues_added.insert(queue.clone()) {
            self.log(|| Undo::Queue(queue.clone()));
        }
    }

    pub(crate) fn push_stream(&mut self, key: Arc<str>, seq: u64, body: Vec<u8>) {
        let n = self.streams.len();
        self.log(|| Undo::Streams(n));
        self.streams.push((key, seq, body));
    }

    pub(crate) fn push_scored(&mut self, trial: String, attempt: String) {
        let n = self.scored.len();
        self.log(|| Undo::Scored(n));
        self.scored.push((trial, attempt));
    }

    pub(crate) fn push_event(&mut self, event: Event) {
        let n = self.events.len();
        self.log(|| Undo::Events(n));
        self.events.push(event);
    }

    pub(crate) fn push_task(&mut self, pos: u32, json: Vec<u8>, id: String) {
        let n = self.bulk_tasks.len();
        self.log(|| Undo::Bulk(n));
        self.bulk_tasks.push((pos, json, id));
    }
}

/// The entry of `key` in `map`, made by `make` if missing; the key is copied only then (a
/// write under a savepoint keeps its own copy for the undo log).
fn entry_of<'a, V>(
    map: &'a mut HashMap<String, V>,
    key: &str,
    make: impl FnOnce() -> V,
) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), make());
    }
    map.get_mut(key).expect("just inserted")
}

/// Fields a round's write set makes room for in each hash it writes, up front: a round of a
/// few claims and outcomes writes about as many fields to each, and growing from empty
/// rehashes the map three or four times.
const ROUND_FIELDS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_takes_back_exactly_the_writes_after_the_savepoint() {
        let mut w = Writes::default();
        let start = w.savepoint();
        w.hset("h".into(), "f".into(), Some(b"1".to_vec()));
        w.zadd("z".into(), 1.0, "a".into());
        w.zrem("z".into(), "gone".into());
        w.add_queue(&Queue::Groups);
        w.push_stream("s".into(), 0, b"x".to_vec());
        let sp = w.savepoint();
        w.hset("h".into(), "f".into(), None);
        w.hset("h".into(), "g".into(), Some(b"2".to_vec()));
        w.zadd("z".into(), 2.0, "gone".into());
        w.zrem("z".into(), "a".into());
        w.add_queue(&Queue::Groups);
        w.add_queue(&Queue::provider("p"));
        w.push_stream("s".into(), 1, b"y".to_vec());
        w.push_scored("t".into(), "1".into());
        w.push_task(0, b"{}".to_vec(), "T0".into());
        w.push_event(Event {
            seq: 0,
            at_ms: 0,
            kind: crate::store::api::EventKind::CampaignDone,
        });
        w.rollback(sp);
        assert_eq!(w.hashes["h"].len(), 1);
        assert_eq!(w.hashes["h"]["f"], Some(b"1".to_vec()));
        assert_eq!(
            w.zsets["z"].added,
            HashMap::from_iter([("a".to_owned(), 1.0)])
        );
        assert_eq!(
            w.zsets["z"].removed,
            HashSet::from_iter(["gone".to_owned()])
        );
        assert_eq!(w.queues_added, BTreeSet::from([Queue::Groups]));
        assert_eq!(w.streams.len(), 1);
        assert!(w.scored.is_empty() && w.bulk_tasks.is_empty());
        assert!(
            w.events.is_empty(),
            "a rolled back operation's events are not reported"
        );
        w.rollback(start);
        assert!(w.is_empty());
    }

    /// Ready entries added without a savepoint are kept as numbers, and read back (folded)
    /// as the same members and scores as `zadd` would have written; a removal sees them.
    #[test]
    fn numeric_ready_entries_fold_into_the_same_members() {
        let mut w = Writes::default();
        for e in [30, 10, 20] {
            w.add_ready("r".into(), e);
        }
        assert_eq!(w.ready_bulk["r"], vec![30, 10, 20]);
        assert!(w.zsets["r"].added.is_empty() && !w.is_empty());
        w.zrem("r".into(), "10".into());
        assert!(w.ready_bulk.is_empty());
        assert_eq!(
            w.zsets["r"].added,
            HashMap::from_iter([("30".to_owned(), 30.0), ("20".to_owned(), 20.0)])
        );
        assert_eq!(w.zsets["r"].removed, HashSet::from_iter(["10".to_owned()]));
        // Added back after a removal: a plain member again, no longer removed.
        w.add_ready("r".into(), 10);
        assert!(w.ready_bulk.is_empty());
        assert_eq!(w.zsets["r"].added["10"], 10.0);
        assert!(w.zsets["r"].removed.is_empty());
        // Small sets fold at commit, large ones stay numeric (to be staged).
        let mut w = Writes::default();
        (0..3).for_each(|e| w.add_ready("small".into(), e));
        (0..5).for_each(|e| w.add_ready("large".into(), e));
        w.fold_ready_up_to(3);
        assert_eq!(w.zsets["small"].added.len(), 3);
        assert_eq!(w.ready_bulk["large"].len(), 5);
        // A savepoint folds everything first.
        w.savepoint();
        assert!(w.ready_bulk.is_empty());
        assert_eq!(w.zsets["large"].added.len(), 5);
    }

    /// Without a savepoint nothing is logged, and the writes are the same.
    #[test]
    fn a_transaction_without_savepoints_logs_no_undo_and_writes_the_same() {
        let writes = |w: &mut Writes| {
            w.hset("h".into(), "f".into(), Some(b"1".to_vec()));
            w.zadd("z".into(), 1.0, "a".into());
            w.zrem("z".into(), "a".into());
            w.zadd("z".into(), 2.0, "b".into());
            w.add_queue(&Queue::Groups);
            w.push_task(0, b"{}".to_vec(), "T0".into());
        };
        let mut plain = Writes::default();
        writes(&mut plain);
        assert!(plain.undo.is_empty());
        let mut logged = Writes::default();
        logged.savepoint();
        writes(&mut logged);
        assert_eq!(logged.undo.len(), 6);
        assert_eq!(plain.hashes, logged.hashes);
        assert_eq!(plain.zsets["z"].added, logged.zsets["z"].added);
        assert_eq!(plain.zsets["z"].removed, logged.zsets["z"].removed);
        assert_eq!(plain.queues_added, logged.queues_added);
        assert_eq!(plain.bulk_tasks, logged.bulk_tasks);
    }
}
