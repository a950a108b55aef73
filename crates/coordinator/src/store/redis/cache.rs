//! What a replica knows of one campaign's committed state at one version: the parsed meta,
//! hash fields it read or wrote, and the lowest members of sorted sets it scanned.
//!
//! A round of operations starts from its campaign's cache at the cache's version (read again
//! first only after the replica lost a commit lately), and hands the cache back, with its own
//! writes applied, once its commit bumped the version by exactly that commit. Every read the
//! cache answers is therefore a read of the committed state the round's commit (or, for a
//! round that writes nothing, its version read) validates, as a read from Redis would be; only
//! the round trip is saved. A version written by anyone else (another replica, a submit)
//! fails that check, and the round runs again from a version read and no cache.

use std::cmp::Ordering;
use std::collections::BTreeSet;

// foldhash, not std's SipHash: a round looks up its keys and fields here many times per
// operation. It is still seeded per process, so task ids cannot be chosen to collide.
use foldhash::{HashMap, HashMapExt};

use super::ahead::Ahead;
use super::writes::ZOverlay;
use lanes_common::spec::Task;

use crate::store::model::Meta;

/// Cached entries (hash fields, sorted set members and tasks) past which a cache is trimmed to
/// its windows' read-ahead (`tx/trim.rs`), the rest read again as rounds need it
/// ([`Cache::limit`]). Its working set is about eight entries
/// per trial at work (its state, lease, token, block and task, the task three ways) and the
/// read-ahead of every ready-queue member a claim scanned (a group's member: all of its
/// trials); what piles up beyond that is finished trials' fields, which the normal course never
/// reads again. Kept, they cost more than reading again: past some tens of thousands of entries
/// every lookup misses the CPU's caches (the coordinator spent ~10 % less CPU per attempt with
/// 20,000 than with 200,000, docs/PERFORMANCE.md). But each trim costs the pipeline: the
/// commits in flight land first, and the next rounds read the records of the trials at work
/// again. At 20,000, 64 busy lanes on a 20,000-trial campaign trimmed six times, at 50,000
/// twice, and ran 1.17–1.25× the cycles per second (docs/PERFORMANCE.md, "Fewer trims").
const MIN_ENTRIES: usize = 50_000;
/// Twice a trial at work's working set.
const ENTRIES_PER_LEASE: usize = 16;
const MAX_ENTRIES: usize = 200_000;

/// A score with the total order Redis sorts by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// How far a scanned sorted set is known, in Redis order (score, then member bytes).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Known {
    /// Every member with a score up to this one (inclusive; `+inf` is the whole set).
    Through(f64),
    /// Every member up to this one (inclusive): a scan that stopped at its limit.
    Until(Score, String),
}

impl Known {
    /// Whether a member at `(score, member)` lies in the known region.
    pub(crate) fn covers(&self, score: f64, member: &str) -> bool {
        match self {
            Known::Through(max) => score <= *max,
            Known::Until(s, m) => (Score(score), member) <= (*s, m.as_str()),
        }
    }

    /// Whether every member with a score up to `max` is known: up to the last member read,
    /// every member with a lower score sorts before it. (Without the second arm, a claim's
    /// `delayed_due(now)` missed on a set holding more than one window, every round.)
    pub(crate) fn covers_through(&self, max: f64) -> bool {
        match self {
            Known::Through(m) => max <= *m,
            Known::Until(s, _) => max < s.0,
        }
    }
}

/// The lowest members of a sorted set, as committed.
#[derive(Debug)]
pub(crate) struct ZKnown {
    pub(crate) order: BTreeSet<(Score, String)>,
    pub(crate) scores: HashMap<String, f64>,
    pub(crate) known: Known,
    /// How many members the scan that read them asked for, so the next scan of the set can
    /// ask for more.
    pub(crate) fetched: usize,
    /// The next window of a ready queue, being read while rounds run ([`Ahead`]), and the
    /// writes to the set committed since it was asked for.
    pub(crate) ahead: Option<Ahead>,
}

impl ZKnown {
    /// A scan's answer: `members` in order, read up to `known` by a scan that asked for
    /// `fetched` members.
    pub(crate) fn new(members: Vec<(String, f64)>, known: Known, fetched: usize) -> Self {
        let mut z = Self {
            order: BTreeSet::new(),
            scores: HashMap::with_capacity(members.len()),
            known,
            fetched,
            ahead: None,
        };
        for (m, s) in members {
            z.order.insert((Score(s), m.clone()));
            z.scores.insert(m, s);
        }
        z
    }

    /// Whether `member` is in the set, if the cache knows.
    pub(crate) fn contains(&self, member: &str, score: f64) -> Option<bool> {
        if self.scores.contains_key(member) {
            return Some(true);
        }
        self.known.covers(score, member).then_some(false)
    }

    fn remove(&mut self, member: &str) {
        if let Some(s) = self.scores.remove(member) {
            self.order.remove(&(Score(s), member.to_owned()));
        }
    }

    /// The lowest members with a score up to `max`, at most `limit`, of the committed members
    /// known here with a transaction's pending changes `over` applied, in Redis order; `None`
    /// when that needs members nobody read.
    pub(crate) fn scan(
        &self,
        over: Option<&ZOverlay>,
        max: f64,
        limit: usize,
    ) -> Option<Vec<(String, f64)>> {
        let pending =
            |m: &str| over.is_some_and(|o| o.removed.contains(m) || o.added.contains_key(m));
        let mut adds: Vec<(Score, &str)> = over
            .map(|o| {
                o.added
                    .iter()
                    .filter(|(_, s)| **s <= max)
                    .map(|(m, s)| (Score(*s), m.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        adds.sort();
        let mut adds = adds.into_iter().peekable();
        let mut committed = self
            .order
            .iter()
            .take_while(|(s, _)| s.0 <= max)
            .filter(|(_, m)| !pending(m))
            .map(|(s, m)| (*s, m.as_str()))
            .peekable();
        let all = self.known.covers_through(max);
        let mut out = Vec::new();
        while out.len() < limit {
            let next = match (committed.peek(), adds.peek()) {
                (Some(c), Some(a)) if c <= a => committed.next(),
                (Some(_), Some(_)) | (None, Some(_)) => adds.next(),
                (Some(_), None) => committed.next(),
                (None, None) => break,
            };
            let Some((s, m)) = next else { break };
            // Past the known region, a committed member nobody read may sort before a
            // pending one.
            if !all && !self.known.covers(s.0, m) {
                return None;
            }
            out.push((m.to_owned(), s.0));
        }
        (all || out.len() >= limit).then_some(out)
    }

    /// A committed `ZADD`: kept if it lands in the known region (and logged for the window
    /// being read ahead, if any).
    pub(crate) fn add(&mut self, member: String, score: f64) {
        self.remove(&member);
        if let Some(ahead) = &mut self.ahead {
            ahead.log.push((member.clone(), Some(score)));
        }
        if self.known.covers(score, &member) {
            self.order.insert((Score(score), member.clone()));
            self.scores.insert(member, score);
        }
    }

    /// A committed `ZREM` (logged for the window being read ahead, if any).
    pub(crate) fn rem(&mut self, member: &str) {
        self.remove(member);
        if let Some(ahead) = &mut self.ahead {
            ahead.log.push((member.to_owned(), None));
        }
    }

    /// Takes in the window read ahead past the known region: `members` (in order, each past
    /// `known` now) as committed at the version the window was read at, known up to
    /// `known`; then replays, in order, every write to the set `log`ged since that version (the
    /// last write of a member decides), so the set is exactly as committed at this cache's
    /// version.
    pub(crate) fn extend(
        &mut self,
        members: Vec<(String, f64)>,
        known: Known,
        fetched: usize,
        log: Vec<(String, Option<f64>)>,
    ) {
        for (m, s) in members {
            self.order.insert((Score(s), m.clone()));
            self.scores.insert(m, s);
        }
        self.known = known;
        self.fetched = fetched;
        for (m, s) in log {
            match s {
                Some(s) => self.add(m, s),
                None => self.rem(&m),
            }
        }
    }
}

/// One campaign's committed state at `version`, as far as this replica read or wrote it.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    pub(crate) version: String,
    /// `None`: not read; `Some(None)`: no campaign.
    pub(crate) meta: Option<Option<Meta>>,
    fields: HashMap<String, HashMap<String, Option<Vec<u8>>>>,
    zsets: HashMap<String, ZKnown>,
    /// Tasks parsed, by position (a task never changes once written).
    tasks: HashMap<u32, Task>,
}

impl Cache {
    /// An empty cache of the state at `version`.
    pub(crate) fn at(version: String) -> Self {
        Self {
            version,
            ..Self::default()
        }
    }

    /// The cached value of a hash field: `Some(None)` means known absent.
    pub(crate) fn field(&self, key: &str, field: &str) -> Option<&Option<Vec<u8>>> {
        self.fields.get(key)?.get(field)
    }

    pub(crate) fn put_field(&mut self, key: &str, field: String, value: Option<Vec<u8>>) {
        match self.fields.get_mut(key) {
            Some(h) => {
                h.insert(field, value);
            }
            None => {
                self.fields
                    .insert(key.to_owned(), HashMap::from_iter([(field, value)]));
            }
        }
    }

    pub(crate) fn task(&self, pos: u32) -> Option<&Task> {
        self.tasks.get(&pos)
    }

    pub(crate) fn put_task(&mut self, pos: u32, task: Task) {
        self.tasks.insert(pos, task);
    }

    pub(crate) fn zset(&self, key: &str) -> Option<&ZKnown> {
        self.zsets.get(key)
    }

    pub(crate) fn zset_mut(&mut self, key: &str) -> Option<&mut ZKnown> {
        self.zsets.get_mut(key)
    }

    pub(crate) fn put_zset(&mut self, key: String, z: ZKnown) {
        self.zsets.insert(key, z);
    }

    /// The sorted sets this cache knows, by key.
    pub(crate) fn zsets(&self) -> impl Iterator<Item = (&String, &ZKnown)> {
        self.zsets.iter()
    }

    /// Keeps only the hash fields `keep(key, field)` keeps and the tasks parsed at
    /// `positions`; the meta and the sorted sets stay whole (`tx/trim.rs`), but not the
    /// windows being read ahead: a field they read may since have been written, then
    /// trimmed, and only a field this cache does not hold is taken from them.
    pub(crate) fn retain(
        &mut self,
        keep: impl Fn(&str, &str) -> bool,
        positions: &foldhash::HashSet<u32>,
    ) {
        self.fields.retain(|key, fields| {
            fields.retain(|f, _| keep(key, f));
            !fields.is_empty()
        });
        self.tasks.retain(|pos, _| positions.contains(pos));
        for z in self.zsets.values_mut() {
            z.ahead = None;
        }
    }

    /// Takes in what a window's read-ahead read (`ahead.rs`): each hash field and task this
    /// cache does not hold. One it holds is as fresh or fresher: every field a commit since
    /// wrote is in this cache, as its own writes are.
    pub(crate) fn absorb(&mut self, read: Cache) {
        for (key, fields) in read.fields {
            let mine = self.fields.entry(key).or_default();
            for (f, v) in fields {
                mine.entry(f).or_insert(v);
            }
        }
        for (pos, task) in read.tasks {
            self.tasks.entry(pos).or_insert(task);
        }
    }

    /// Whether the cache grew past [`Self::limit`] and should be trimmed (or dropped).
    pub(crate) fn is_large(&self) -> bool {
        let fields: usize = self.fields.values().map(HashMap::len).sum();
        let members = self.members();
        fields + members + self.tasks.len() > self.limit(members)
    }

    /// The sorted-set members this cache knows, in all its sets.
    pub(crate) fn members(&self) -> usize {
        self.zsets.values().map(|z| z.scores.len()).sum()
    }

    /// The entries this cache may hold: twice its working set (every open lease's, and the
    /// read-ahead of the `members` of sorted sets it knows), at least [`MIN_ENTRIES`], at most
    /// [`MAX_ENTRIES`]. A limit under the working set would trim the cache at every round.
    fn limit(&self, members: usize) -> usize {
        let (leases, arms) = match &self.meta {
            Some(Some(meta)) => (
                usize::try_from(meta.leases_open).unwrap_or(usize::MAX),
                meta.spec.arms.len(),
            ),
            _ => (0, 1),
        };
        // A member's read-ahead: the member, and per trial of it (a group holds one per arm)
        // its state and lease, beside its task (three ways) and block.
        let per_member = 2 * (1 + 2 * arms + 4);
        leases
            .saturating_mul(ENTRIES_PER_LEASE)
            .saturating_add(members.saturating_mul(per_member))
            .clamp(MIN_ENTRIES, MAX_ENTRIES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(members: &[(&str, f64)], known: Known) -> ZKnown {
        ZKnown::new(
            members.iter().map(|(m, s)| (m.to_string(), *s)).collect(),
            known,
            members.len(),
        )
    }

    /// A cache of `n` fields of one hash, with `leases` open leases in its meta.
    fn cache_of(n: usize, leases: Option<u64>) -> Cache {
        let mut c = Cache::at("1".into());
        c.meta = leases.map(|l| {
            let text = "id = \"m\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n\
                        [driver]\nsim = {}\n[tasks]\nitems = [{ id = \"t\" }]\n";
            let campaign = lanes_common::spec::load_str(
                text,
                std::path::Path::new("m.toml"),
                std::path::Path::new("."),
            )
            .expect("a campaign");
            let mut meta = crate::store::engine::new_meta(&campaign, "h".into(), 0);
            meta.leases_open = l;
            Some(meta)
        });
        for i in 0..n {
            c.put_field("k", i.to_string(), None);
        }
        c
    }

    #[test]
    fn a_cache_is_trimmed_past_its_working_set_not_before() {
        // At least 50,000 entries, whatever the leases.
        assert!(!cache_of(MIN_ENTRIES, None).is_large());
        assert!(cache_of(MIN_ENTRIES + 1, None).is_large());
        assert!(cache_of(MIN_ENTRIES + 1, Some(10)).is_large());
        // 16 per open lease beyond that: 5,000 leases at work keep 80,000.
        assert!(!cache_of(MIN_ENTRIES + 1, Some(5_000)).is_large());
        assert!(!cache_of(80_000, Some(5_000)).is_large());
        assert!(cache_of(80_001, Some(5_000)).is_large());
        // At most 200,000.
        assert!(cache_of(200_001, Some(20_000)).is_large());
    }

    #[test]
    fn a_cache_keeps_room_for_the_read_ahead_of_the_queues_it_scanned() {
        // Two hundred queues of 256 members scanned (as claims over two hundred providers read
        // them), and their read-ahead: over 50,000 entries with no lease open, which must not
        // be dropped at every round. One arm: 2 * (1 + 2 + 4) = 14 entries of room per member.
        let mut c = cache_of(12_800, Some(0));
        for q in 0..200 {
            let members = (0..256).map(|i| (format!("{q}:{i}"), 0.0)).collect();
            c.put_zset(
                format!("ready:{q}"),
                ZKnown::new(members, Known::Through(0.0), 256),
            );
        }
        assert!(!c.is_large(), "64,000 entries against 51,200 * 14 of room");
        assert!(cache_of(MIN_ENTRIES + 1, Some(0)).is_large());
    }

    #[test]
    fn a_scan_cut_at_its_limit_knows_exactly_its_prefix() {
        // Redis order: score, then member bytes.
        let k = z(
            &[("a", 1.0), ("b", 2.0), ("c", 2.0)],
            Known::Until(Score(2.0), "c".into()),
        );
        assert_eq!(k.contains("b", 2.0), Some(true));
        assert_eq!(k.contains("bb", 2.0), Some(false), "bb sorts before c");
        assert_eq!(k.contains("d", 2.0), None, "d sorts after c: unknown");
        assert_eq!(k.contains("x", 3.0), None);
        assert!(!k.known.covers_through(2.0));
        // Below the last member's score, every member is known.
        assert!(k.known.covers_through(1.5));
    }

    #[test]
    fn a_cut_scan_answers_a_bounded_scan_below_its_last_score() {
        // Read up to (4, "d"): every member with a score under 4 is known, so a scan of
        // those answers from the cache however few there are (before, it went to Redis
        // unless it filled its limit: a claim's scan of the due delayed trials did, every
        // round, on a set larger than one window).
        let k = z(
            &[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)],
            Known::Until(Score(4.0), "d".into()),
        );
        assert_eq!(
            names(k.scan(None, 2.5, 256)),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(names(k.scan(None, 3.99, 256)).map(|v| v.len()), Some(3));
        // At the last member's score, another member may follow it: unknown.
        assert_eq!(names(k.scan(None, 4.0, 256)), None);
    }

    fn names(scan: Option<Vec<(String, f64)>>) -> Option<Vec<String>> {
        scan.map(|v| v.into_iter().map(|(m, _)| m).collect())
    }

    #[test]
    fn a_scan_merges_pending_writes_and_stops_where_knowledge_ends() {
        let k = z(
            &[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)],
            Known::Until(Score(4.0), "d".into()),
        );
        let mut over = ZOverlay::default();
        over.removed.insert("b".into());
        over.added.insert("c".into(), 0.5);
        over.added.insert("x".into(), 3.5);
        over.added.insert("y".into(), 9.0);
        let scan = |max, limit| names(k.scan(Some(&over), max, limit));
        let v = |s: &[&str]| Some(s.iter().map(|m| m.to_string()).collect::<Vec<_>>());
        assert_eq!(scan(f64::INFINITY, 4), v(&["c", "a", "x", "d"]));
        assert_eq!(
            scan(3.9, 10),
            v(&["c", "a", "x"]),
            "d is past 3.9: all known"
        );
        assert_eq!(scan(4.0, 10), None, "another member may follow d at 4.0");
        assert_eq!(scan(f64::INFINITY, 5), None, "y lies past what was read");
        assert_eq!(names(k.scan(None, f64::INFINITY, 2)), v(&["a", "b"]));
        let all = z(&[("a", 1.0)], Known::Through(f64::INFINITY));
        assert_eq!(names(all.scan(Some(&over), 5.0, 9)), v(&["c", "a", "x"]));
    }

    #[test]
    fn committed_writes_keep_only_the_known_region() {
        let mut k = z(&[("a", 1.0), ("b", 5.0)], Known::Through(5.0));
        k.add("c".into(), 3.0);
        k.add("a".into(), 9.0);
        k.rem("b");
        let members: Vec<_> = k.order.iter().map(|(s, m)| (s.0, m.as_str())).collect();
        assert_eq!(members, vec![(3.0, "c")]);
        assert_eq!(k.contains("a", 9.0), None, "moved past the region: unknown");
        assert_eq!(k.contains("b", 5.0), Some(false));
        assert!(k.known.covers_through(5.0));
    }

    /// A window read at an earlier version, then writes past the known region committed since
    /// (logged while it was read): taken in, the set is the one committed now.
    #[test]
    fn a_window_read_ahead_takes_in_the_writes_committed_since() {
        let mut k = z(
            &[("1", 1.0), ("2", 2.0)],
            Known::Until(Score(2.0), "2".into()),
        );
        let (_answer, window) = tokio::sync::oneshot::channel();
        k.ahead = Some(Ahead {
            window,
            log: Vec::new(),
        });
        // Since the window's version: a claim of a known member, a unit added inside the
        // window, one past it, one the window holds removed, then one removed and added
        // back.
        k.rem("1");
        k.add("4".into(), 4.0);
        k.add("9".into(), 9.0);
        k.rem("5");
        k.rem("6");
        k.add("6".into(), 6.0);
        let ahead = k.ahead.take().expect("a window asked for");
        assert_eq!(
            ahead.log,
            [
                ("1".to_string(), None),
                ("4".to_string(), Some(4.0)),
                ("9".to_string(), Some(9.0)),
                ("5".to_string(), None),
                ("6".to_string(), None),
                ("6".to_string(), Some(6.0)),
            ]
        );
        // The window as read: 3, 5, 6, 7 (the scan stopped at its limit of four).
        let read: Vec<(String, f64)> = [3.0, 5.0, 6.0, 7.0]
            .iter()
            .map(|s| (s.to_string(), *s))
            .collect();
        k.extend(read, Known::Until(Score(7.0), "7".into()), 4, ahead.log);
        let members: Vec<_> = k.order.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(members, ["2", "3", "4", "6", "7"]);
        assert_eq!(k.contains("9", 9.0), None, "past the window: unknown");
        assert_eq!(k.contains("5", 5.0), Some(false));
        assert_eq!(k.fetched, 4);
        assert_eq!(k.scan(None, f64::INFINITY, 10), None, "more past 7");
        assert_eq!(k.scan(None, 6.5, 10).map(|m| m.len()), Some(4));
    }
}
