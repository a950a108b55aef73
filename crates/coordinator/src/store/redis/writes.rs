//! A transaction's buffered writes, with savepoints: a round runs several operations in one
//! transaction, and one that fails is rolled back to where it started without touching the
//! others' writes.

use std::collections::{BTreeSet, HashMap, HashSet};

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
}

/// The write set of a transaction.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    pub(crate) meta: Option<Box<Meta>>,
    pub(crate) hashes: HashMap<String, HashMap<String, Option<Vec<u8>>>>,
    pub(crate) zsets: HashMap<String, ZOverlay>,
    pub(crate) queues_added: BTreeSet<Queue>,
    /// (stream key, entry id, body).
    pub(crate) streams: Vec<(String, String, Vec<u8>)>,
    /// (trial, attempt) of counted rows: first scored wins, checked by the commit script.
    pub(crate) scored: Vec<(String, String)>,
    /// New tasks (position, JSON, id), staged in chunks before the commit and merged by the
    /// commit script, so they are invisible to every other transaction until then.
    pub(crate) bulk_tasks: Vec<(u32, Vec<u8>, String)>,
    undo: Vec<Undo>,
}

/// Where a savepoint was taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Savepoint(usize);

impl Writes {
    pub(crate) fn savepoint(&self) -> Savepoint {
        Savepoint(self.undo.len())
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
    }

    pub(crate) fn set_meta(&mut self, meta: Meta) {
        let was = self.meta.replace(Box::new(meta));
        self.undo.push(Undo::Meta(was));
    }

    /// A pending field write; `None` deletes it.
    pub(crate) fn hset(&mut self, key: String, field: String, value: Option<Vec<u8>>) {
        let was = self
            .hashes
            .entry(key.clone())
            .or_default()
            .insert(field.clone(), value);
        self.undo.push(Undo::Hash { key, field, was });
    }

    fn z_was(&mut self, key: &str, member: &str) -> ZWas {
        let z = self.zsets.entry(key.to_owned()).or_default();
        if let Some(s) = z.added.get(member) {
            ZWas::Added(*s)
        } else if z.removed.contains(member) {
            ZWas::Removed
        } else {
            ZWas::Untouched
        }
    }

    pub(crate) fn zadd(&mut self, key: String, score: f64, member: String) {
        let was = self.z_was(&key, &member);
        let z = self.zsets.entry(key.clone()).or_default();
        z.removed.remove(&member);
        z.added.insert(member.clone(), score);
        self.undo.push(Undo::Z { key, member, was });
    }

    pub(crate) fn zrem(&mut self, key: String, member: String) {
        let was = self.z_was(&key, &member);
        let z = self.zsets.entry(key.clone()).or_default();
        z.added.remove(&member);
        z.removed.insert(member.clone());
        self.undo.push(Undo::Z { key, member, was });
    }

    pub(crate) fn add_queue(&mut self, queue: &Queue) {
        if self.queues_added.insert(queue.clone()) {
            self.undo.push(Undo::Queue(queue.clone()));
        }
    }

    pub(crate) fn push_stream(&mut self, key: String, id: String, body: Vec<u8>) {
        self.undo.push(Undo::Streams(self.streams.len()));
        self.streams.push((key, id, body));
    }

    pub(crate) fn push_scored(&mut self, trial: String, attempt: String) {
        self.undo.push(Undo::Scored(self.scored.len()));
        self.scored.push((trial, attempt));
    }

    pub(crate) fn push_task(&mut self, pos: u32, json: Vec<u8>, id: String) {
        self.undo.push(Undo::Bulk(self.bulk_tasks.len()));
        self.bulk_tasks.push((pos, json, id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_takes_back_exactly_the_writes_after_the_savepoint() {
        let mut w = Writes::default();
        w.hset("h".into(), "f".into(), Some(b"1".to_vec()));
        w.zadd("z".into(), 1.0, "a".into());
        w.zrem("z".into(), "gone".into());
        w.add_queue(&Queue::Groups);
        w.push_stream("s".into(), "0-1".into(), b"x".to_vec());
        let sp = w.savepoint();
        w.hset("h".into(), "f".into(), None);
        w.hset("h".into(), "g".into(), Some(b"2".to_vec()));
        w.zadd("z".into(), 2.0, "gone".into());
        w.zrem("z".into(), "a".into());
        w.add_queue(&Queue::Groups);
        w.add_queue(&Queue::provider("p"));
        w.push_stream("s".into(), "0-2".into(), b"y".to_vec());
        w.push_scored("t".into(), "1".into());
        w.push_task(0, b"{}".to_vec(), "T0".into());
        w.rollback(sp);
        assert_eq!(w.hashes["h"].len(), 1);
        assert_eq!(w.hashes["h"]["f"], Some(b"1".to_vec()));
        assert_eq!(w.zsets["z"].added, HashMap::from([("a".to_owned(), 1.0)]));
        assert_eq!(w.zsets["z"].removed, HashSet::from(["gone".to_owned()]));
        assert_eq!(w.queues_added, BTreeSet::from([Queue::Groups]));
        assert_eq!(w.streams.len(), 1);
        assert!(w.scored.is_empty() && w.bulk_tasks.is_empty());
        w.rollback(Savepoint(0));
        assert!(w.is_empty());
    }
}
