//! The lane's on-disk outbox: an outcome is written here, and synced to disk, before it is
//! sent, and emptied only when the coordinator acknowledged it. After a reconnect or a restart every
//! entry is sent again; the store's per-token idempotency makes the replay land exactly once.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use lanes_common::ids::{AttemptTag, CampaignId};
use lanes_common::lease::LeaseSecret;
use lanes_common::row::Outcome;

use crate::private_fs;
use crate::slots::{Slots, Unreadable, sync_dir};

/// One unacknowledged outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub campaign: CampaignId,
    pub outcome: Outcome,
    /// The attempt's `outcome.json`. The lane writes it as `<record>.pending`; it gets its
    /// final name only once this entry is durable, so a crash never leaves a score on disk
    /// that no outbox replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<PathBuf>,
    /// The lease secret the coordinator issued with the attempt: an outcome is accepted only
    /// with it. The supervisor fills it in from the lease it tracks.
    #[serde(default)]
    pub lease: LeaseSecret,
    /// The attempt folder still to upload to the artifact store: the outcome is sent only
    /// once its files are in the store (and then lists them), so a worker that dies
    /// mid-upload uploads again when it restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<PathBuf>,
}

/// The name an attempt record has until its outbox entry is durable.
pub fn pending_record(record: &Path) -> PathBuf {
    let mut name = record.as_os_str().to_owned();
    name.push(".pending");
    PathBuf::from(name)
}

impl Entry {
    /// The attempt this entry is about.
    pub fn tag(&self) -> AttemptTag {
        AttemptTag::new(self.campaign.clone(), self.outcome.token.clone())
    }

    /// [`Self::seal_record`] for an entry read back at start, whose record was written before
    /// a crash: the record is not synced to disk, so a machine crash may have cut it short.
    /// Only a whole record (one that parses) gets its final name; a cut one keeps its pending
    /// name, and the outcome is whole in the ledger once the entry is replayed.
    pub fn seal_record_at_start(&self) {
        let Some(record) = &self.record else { return };
        let pending = pending_record(record);
        match fs::read(&pending) {
            Ok(bytes) if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() => {
                tracing::warn!(path = %pending.display(), "an attempt record cut short by a crash keeps its pending name");
            }
            _ => self.seal_record(),
        }
    }

    /// Gives the attempt record its final name; call once the entry is durable. Idempotent:
    /// a replay after a crash between the outbox write and the rename finishes the rename.
    pub fn seal_record(&self) {
        let Some(record) = &self.record else { return };
        let pending = pending_record(record);
        match fs::rename(&pending, record) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %pending.display(), error = %e, "cannot seal the attempt record")
            }
        }
    }
}

/// A directory of entries, one per [slot](crate::slots) (`slot-<n>.json`), written over in
/// place once acknowledged.
#[derive(Debug, Clone)]
pub struct Outbox {
    dir: PathBuf,
    slots: Slots,
    /// Test failpoint: while this file exists, every write fails as a full disk would.
    full_while: Option<PathBuf>,
}

/// The environment variable naming the failpoint file (for the fault suite).
pub const FULL_FAILPOINT_ENV: &str = "LANES_FAILPOINT_OUTBOX_FULL";

impl Outbox {
    pub fn open(dir: &Path) -> io::Result<Self> {
        let slots = Slots::open(dir, "json")?;
        // Earlier versions wrote each entry to a temp file first: one left by a crash was
        // never acknowledged or sent.
        for e in fs::read_dir(dir)? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "tmp") {
                fs::remove_file(&p)?;
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            slots,
            full_while: std::env::var_os(FULL_FAILPOINT_ENV).map(PathBuf::from),
        })
    }

    /// The name an entry is set aside under. Ids are validated, so they are safe as
    /// file-name parts. Neither a campaign nor a trial id has a `_`, so
    /// `campaign__trial__aN` names exactly one attempt.
    fn name(tag: &AttemptTag) -> String {
        format!(
            "{}__{}__a{}.json",
            tag.campaign, tag.token.trial_id, tag.token.attempt
        )
    }

    /// Writes an entry and syncs it to disk before returning. A crash mid-write leaves a
    /// torn entry, which [`Self::pending`] sets aside: it was never sent.
    pub fn put(&self, entry: &Entry) -> io::Result<PathBuf> {
        if self.full_while.as_ref().is_some_and(|p| p.exists()) {
            // ENOSPC, as a full disk answers.
            return Err(io::Error::from_raw_os_error(28));
        }
        let bytes = serde_json::to_vec(entry).map_err(io::Error::other)?;
        let tag = entry.tag();
        self.slots.write(&tag, &bytes, true).inspect_err(|_| {
            // Whatever part was written is no entry: the slot is emptied (truncating works
            // on a full disk), so a restart finds nothing torn, and the supervisor keeps the
            // outcome in memory and writes it again.
            let _ = self.slots.clear(&tag);
        })
    }

    /// Whether an entry could be written now: writes, fsyncs and removes a probe file (a
    /// temp file, so one left by a crash is dropped at the next open).
    pub fn probe(&self) -> io::Result<()> {
        if self.full_while.as_ref().is_some_and(|p| p.exists()) {
            return Err(io::Error::from_raw_os_error(28));
        }
        let path = self.dir.join("probe.tmp");
        {
            let mut f = private_fs::create_file(&path)?;
            f.write_all(b"probe")?;
            f.sync_all()?;
        }
        fs::remove_file(&path)
    }

    /// Empties an acknowledged entry's slot; a missing one is fine (acknowledged twice). Not
    /// synced: an entry that comes back after a crash is replayed, and acknowledged again as
    /// a duplicate.
    pub fn remove(&self, tag: &AttemptTag) -> io::Result<()> {
        self.slots.clear(tag)
    }

    /// Moves an entry the coordinator refused for good into `refused/`, with the reason next
    /// to it: it is never sent again, and never deleted.
    pub fn set_aside(&self, tag: &AttemptTag, reason: &str) -> io::Result<()> {
        let Some(from) = self.slots.take(tag) else {
            return Ok(());
        };
        let dir = self.dir.join("refused");
        private_fs::create_dir(&dir)?;
        let name = Self::name(tag);
        fs::rename(&from, dir.join(&name))?;
        private_fs::write(&dir.join(&name).with_extension("reason"), reason.as_bytes())?;
        sync_dir(&dir)?;
        sync_dir(&self.dir)
    }

    /// How many entries are unacknowledged (`.json` files of more than one byte: an empty slot
    /// keeps one), without reading them: exact whichever process wrote them.
    pub fn pending_count(&self) -> io::Result<usize> {
        let mut n = 0;
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            if e.path().extension().is_some_and(|x| x == "json")
                && crate::slots::holds_record(e.metadata()?.len())
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every unacknowledged entry, in attempt order; read once at start, it also learns
    /// where each is, so acknowledging one empties its slot. An unreadable entry (a write
    /// torn by a crash, before the outcome was ever sent) is never dropped silently: it is
    /// kept aside as `<file>.unreadable` and logged.
    pub fn pending(&self) -> io::Result<Vec<Entry>> {
        self.slots
            .read_back("outbox entry", Entry::tag, Unreadable::SetAside)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::{Token, TrialId};
    use lanes_common::row::Status;

    fn entry(attempt: u32) -> Entry {
        entry_of("c", attempt)
    }

    fn entry_of(campaign: &str, attempt: u32) -> Entry {
        let token = Token {
            trial_id: TrialId::new("T1.r0.a").unwrap(),
            attempt,
        };
        let mut o = Outcome::new(
            token,
            "lane-0".parse().unwrap(),
            "host".parse().unwrap(),
            Status::Completed,
        );
        o.result.score = Some(1.0);
        Entry {
            campaign: CampaignId::new(campaign).unwrap(),
            outcome: o,
            record: None,
            lease: Default::default(),
            upload: None,
        }
    }

    #[test]
    fn a_crash_between_write_and_ack_is_replayed_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ob = Outbox::open(dir.path()).unwrap();
            ob.put(&entry(1)).unwrap();
            // Crash: the process dies before the ack; nothing else happens.
        }
        // A half-written entry from the crash.
        std::fs::write(dir.path().join("c__T1.r0.a__a2.tmp"), b"{\"trunc").unwrap();
        let ob = Outbox::open(dir.path()).unwrap();
        let pending = ob.pending().unwrap();
        assert_eq!(
            pending,
            vec![entry(1)],
            "replayed once, the torn write is gone"
        );
        // The replay is acknowledged: removed, and a second ack is harmless.
        ob.remove(&pending[0].tag()).unwrap();
        ob.remove(&pending[0].tag()).unwrap();
        assert!(ob.pending().unwrap().is_empty());
        assert!(
            Outbox::open(dir.path())
                .unwrap()
                .pending()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_record_keeps_its_pending_name_until_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("outcome.json");
        let mut e = entry(1);
        e.record = Some(record.clone());
        std::fs::write(pending_record(&record), b"{}").unwrap();
        // A crash before the outbox write leaves only the pending name.
        assert!(!record.exists());
        let ob = Outbox::open(&dir.path().join("outbox")).unwrap();
        ob.put(&e).unwrap();
        // A crash between the write and the rename: the replay seals it.
        let replayed = ob.pending().unwrap();
        assert_eq!(replayed, vec![e.clone()]);
        replayed[0].seal_record();
        assert!(record.exists() && !pending_record(&record).exists());
        // Sealing twice is harmless.
        e.seal_record();
        assert!(record.exists());
    }

    #[test]
    fn entries_are_kept_per_token() {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::open(dir.path()).unwrap();
        ob.put(&entry(1)).unwrap();
        ob.put(&entry(2)).unwrap();
        ob.put(&entry(2)).unwrap();
        assert_eq!(ob.pending().unwrap().len(), 2);
    }

    #[test]
    fn campaigns_sharing_a_token_keep_separate_entries() {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::open(dir.path()).unwrap();
        let (a, b) = (entry_of("coll-a", 1), entry_of("coll-b", 1));
        ob.put(&a).unwrap();
        ob.put(&b).unwrap();
        assert_eq!(ob.pending().unwrap(), vec![a.clone(), b.clone()]);
        // Acknowledging one campaign's attempt leaves the other's outcome pending.
        ob.remove(&a.tag()).unwrap();
        assert_eq!(ob.pending().unwrap(), vec![b.clone()]);
        ob.set_aside(&b.tag(), "refused").unwrap();
        assert!(ob.pending().unwrap().is_empty());
        assert!(dir.path().join("refused/coll-b__T1.r0.a__a1.json").exists());
    }

    /// A slot torn by a crash mid-write (its outcome was never sent) is not replayed, and is
    /// kept aside for people; acknowledged entries leave empty slots that are written over,
    /// and count as nothing pending.
    #[test]
    fn a_torn_slot_is_set_aside_and_acknowledged_slots_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::open(dir.path()).unwrap();
        let first = ob.put(&entry(1)).unwrap();
        ob.put(&entry(2)).unwrap();
        assert_eq!(ob.pending_count().unwrap(), 2);
        ob.remove(&entry(1).tag()).unwrap();
        assert_eq!(ob.pending_count().unwrap(), 1);
        assert_eq!(
            ob.put(&entry(3)).unwrap(),
            first,
            "the emptied slot is reused"
        );
        std::fs::write(
            dir.path().join("slot-9.json"),
            b"{\"campaign\":\"c\",\"outc",
        )
        .unwrap();
        let ob = Outbox::open(dir.path()).unwrap();
        assert_eq!(ob.pending().unwrap(), vec![entry(2), entry(3)]);
        assert!(dir.path().join("slot-9.json.unreadable").exists());
        assert_eq!(ob.pending_count().unwrap(), 2);
    }

    /// A record cut short by a machine crash (it is not synced) keeps its pending name when
    /// the entry is read back at start; a whole one gets its final name.
    #[test]
    fn only_a_whole_record_is_sealed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let (whole, cut) = (
            dir.path().join("a/outcome.json"),
            dir.path().join("b/outcome.json"),
        );
        for (r, bytes) in [(&whole, &b"{\"score\": 1}"[..]), (&cut, &b"{\"sco"[..])] {
            std::fs::create_dir_all(r.parent().unwrap()).unwrap();
            std::fs::write(pending_record(r), bytes).unwrap();
        }
        let (mut a, mut b) = (entry(1), entry(2));
        a.record = Some(whole.clone());
        b.record = Some(cut.clone());
        a.seal_record_at_start();
        b.seal_record_at_start();
        assert!(whole.exists() && !pending_record(&whole).exists());
        assert!(!cut.exists() && pending_record(&cut).exists());
    }
}
