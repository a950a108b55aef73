//! Files reused in place: a directory of numbered slots (`slot-<n>.<ext>`), each holding one
//! attempt's record or nothing.
//!
//! The outbox and the lease journal write a small record per attempt and drop it once the
//! attempt is over. A file per record, created and then deleted, cost an inode allocated and
//! freed per record. On ext4 without a journal the allocator skips (checking each) every inode
//! freed in the last minutes, so a busy worker's creates slowed down as it went: a third of a
//! worker's CPU went to `find_inode_bit` at 1,000 attempts a second. A slot is a file that
//! stays: a record is written over it in place, and the slot is emptied when the record is
//! done. An empty slot is free.
//!
//! Empty is one byte or none ([`holds_record`]): a record is a JSON object, never that short.
//! Emptying cuts a slot to one byte, not to nothing, so the file keeps its data block. ext4
//! frees the block of a file cut to nothing (with the `discard` mount option it also waits for
//! the disk to trim it), allocates one again for the next record, and flushes a file cut to
//! nothing and written again when it is closed: 7 % of a busy worker's CPU went to emptying
//! slots that way, and more to the next write.
//!
//! A record is written over a slot that is empty (a free one), or over one cut to one byte
//! first (the same attempt's record written again). A write torn by a crash leaves the slot
//! empty or holding a prefix of the record, which never parses as a whole record: its reader
//! treats it as never written (see each reader). Records that must be durable are
//! `fdatasync`ed, and a slot's directory entry is synced once, when the slot file is first made
//! (and the directory once more when it is opened). Emptying a slot is not synced: an emptied
//! record that comes back after a crash is one whose attempt was already over, and both
//! readers handle that (a replayed outcome is acknowledged again as a duplicate; a lease
//! journal entry names a lease that is forfeited or already gone).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;

use lanes_common::ids::AttemptTag;

/// A directory of slots. Clones share their bookkeeping.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    dir: PathBuf,
    ext: &'static str,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The file holding each attempt's record: a slot, or a file of the one-file-per-record
    /// layout of earlier versions, read at start.
    by_tag: HashMap<AttemptTag, PathBuf>,
    /// Empty slot files.
    free: BTreeSet<u64>,
    /// The next slot number never used.
    next: u64,
    /// Slot files made whose directory entry is not synced yet.
    unsynced: HashSet<PathBuf>,
}

/// Syncs a directory, so the entries made in it survive a crash.
/// What [`Slots::read_back`] does with a file that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// Keeps it for people, as `<name>.unreadable`: it may hold something nobody else has.
    SetAside,
    /// Empties its slot: what it held is of no use torn.
    Empty,
}

/// The length an emptied slot is cut to: one byte keeps the file's data block.
const EMPTY_LEN: u64 = 1;

/// Whether a slot file of `len` bytes holds a record (or a torn one): at most one byte is an
/// empty slot (a file of the earlier layout that emptied slots to nothing is empty too).
pub(crate) fn holds_record(len: u64) -> bool {
    len > EMPTY_LEN
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Slots {
    /// The slots in `dir` (made if missing, private to the owner): empty ones are free.
    pub(crate) fn open(dir: &Path, ext: &'static str) -> io::Result<Self> {
        crate::private_fs::create_dir(dir)?;
        let mut state = State::default();
        for e in fs::read_dir(dir)? {
            let e = e?;
            let Some(n) = slot_number(&e.path(), ext) else {
                continue;
            };
            state.next = state.next.max(n + 1);
            if !holds_record(e.metadata()?.len()) {
                state.free.insert(n);
            }
        }
        // A slot file an earlier process made may not have had its directory entry synced
        // yet (it died first): once here, every slot reused below is on disk.
        sync_dir(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            ext,
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain bookkeeping: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot(&self, n: u64) -> PathBuf {
        self.dir.join(format!("slot-{n}.{}", self.ext))
    }

    /// Writes `tag`'s record over its slot (a free one, or a new one, if it has none yet);
    /// with `durable`, the record is on disk when this returns.
    pub(crate) fn write(
        &self,
        tag: &AttemptTag,
        bytes: &[u8],
        durable: bool,
    ) -> io::Result<PathBuf> {
        debug_assert!(
            holds_record(bytes.len() as u64),
            "a record is never that short"
        );
        // `empty`: the slot holds no record, so the record is written over it as it is.
        let (path, empty) = {
            let mut s = self.lock();
            match s.by_tag.get(tag) {
                Some(p) => (p.clone(), false),
                None => {
                    let path = match s.free.pop_first() {
                        Some(n) => self.slot(n),
                        None => {
                            let n = s.next;
                            s.next += 1;
                            let path = self.slot(n);
                            s.unsynced.insert(path.clone());
                            path
                        }
                    };
                    s.by_tag.insert(tag.clone(), path.clone());
                    (path, true)
                }
            }
        };
        let f = crate::private_fs::open_in_place(&path)?;
        if !empty {
            // The attempt's earlier record: cut first, so no tail of it outlives this one.
            f.set_len(EMPTY_LEN)?;
        }
        f.write_all_at(bytes, 0)?;
        if durable {
            f.sync_data()?;
            if self.lock().unsynced.contains(&path) {
                sync_dir(&self.dir)?;
                self.lock().unsynced.remove(&path);
            }
        }
        Ok(path)
    }

    /// Empties `tag`'s slot and frees it (a file of the earlier layout is deleted). Nothing
    /// to do for a tag without a record (emptied twice).
    pub(crate) fn clear(&self, tag: &AttemptTag) -> io::Result<()> {
        let path = self.lock().by_tag.remove(tag);
        match path {
            Some(path) => self.empty(&path),
            None => Ok(()),
        }
    }

    /// Empties a file of this directory (deletes one of the earlier layout); a slot is free
    /// again.
    pub(crate) fn empty(&self, path: &Path) -> io::Result<()> {
        match slot_number(path, self.ext) {
            Some(n) => {
                // Emptied before it is free: a write into it never meets the old record.
                crate::private_fs::open_in_place(path)?.set_len(EMPTY_LEN)?;
                self.lock().free.insert(n);
                Ok(())
            }
            None => match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        }
    }

    /// Forgets `tag`'s record without touching its file (the caller moves the file away);
    /// returns where it was.
    pub(crate) fn take(&self, tag: &AttemptTag) -> Option<PathBuf> {
        self.lock().by_tag.remove(tag)
    }

    /// Records that `path`, read back at start, holds `tag`'s record. A second file for the
    /// same attempt (never written so, but harmless) is emptied.
    pub(crate) fn adopt(&self, tag: AttemptTag, path: PathBuf) -> io::Result<()> {
        let mut s = self.lock();
        match s.by_tag.get(&tag) {
            Some(kept) if *kept != path => {
                drop(s);
                self.empty(&path)
            }
            _ => {
                s.by_tag.insert(tag, path);
                Ok(())
            }
        }
    }

    /// Every file holding a record, with its bytes: the non-empty slots (by number), then the
    /// files of the earlier one-file-per-record layout (`*.<ext>`, by name).
    pub(crate) fn filled(&self) -> io::Result<Vec<(PathBuf, Vec<u8>)>> {
        let mut slots = Vec::new();
        let mut legacy = Vec::new();
        for e in fs::read_dir(&self.dir)? {
            let p = e?.path();
            match slot_number(&p, self.ext) {
                Some(n) => slots.push((n, p)),
                None if p.extension().is_some_and(|x| x == self.ext) => legacy.push(p),
                None => {}
            }
        }
        slots.sort();
        legacy.sort();
        let mut out = Vec::new();
        for p in slots.into_iter().map(|(_, p)| p).chain(legacy) {
            let bytes = fs::read(&p)?;
            if holds_record(bytes.len() as u64) {
                out.push((p, bytes));
            }
        }
        Ok(out)
    }

    /// Every record held, parsed, in attempt order; each slot is adopted by its record's
    /// attempt, so clearing that attempt empties it. The same attempt twice (never written
    /// so) is read once, and `adopt` empties the other slot. A file that does not parse (a
    /// write torn by a crash) is logged and handled as `unreadable` says.
    pub(crate) fn read_back<T: DeserializeOwned>(
        &self,
        what: &str,
        tag_of: impl Fn(&T) -> AttemptTag,
        unreadable: Unreadable,
    ) -> io::Result<Vec<T>> {
        let mut out: Vec<(AttemptTag, T)> = Vec::new();
        for (p, bytes) in self.filled()? {
            match serde_json::from_slice::<T>(&bytes) {
                Ok(record) => {
                    let tag = tag_of(&record);
                    let again = out.iter().any(|(t, _)| *t == tag);
                    self.adopt(tag.clone(), p)?;
                    if !again {
                        out.push((tag, record));
                    }
                }
                Err(err) => match unreadable {
                    Unreadable::SetAside => {
                        tracing::error!(path = %p.display(), error = %err, "unreadable {what} set aside");
                        self.set_unreadable_aside(&p)?;
                    }
                    Unreadable::Empty => {
                        tracing::warn!(path = %p.display(), error = %err, "unreadable {what} dropped");
                        self.empty(&p)?;
                    }
                },
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out.into_iter().map(|(_, r)| r).collect())
    }

    /// Moves an unreadable file out of the way under `<name>.unreadable`, kept for people;
    /// its slot number is not used again by this process.
    pub(crate) fn set_unreadable_aside(&self, path: &Path) -> io::Result<()> {
        let mut name = path.as_os_str().to_owned();
        name.push(".unreadable");
        fs::rename(path, PathBuf::from(name))
    }
}

/// `n` if `path` is `slot-<n>.<ext>`.
fn slot_number(path: &Path, ext: &str) -> Option<u64> {
    if path.extension()? != ext {
        return None;
    }
    path.file_stem()?
        .to_str()?
        .strip_prefix("slot-")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::{CampaignId, Token, TrialId};

    fn tag(attempt: u32) -> AttemptTag {
        AttemptTag::new(
            CampaignId::new("c").unwrap(),
            Token {
                trial_id: TrialId::new("T1.r0.a").unwrap(),
                attempt,
            },
        )
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_cleared_slot_is_written_over_and_no_file_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::open(dir.path(), "rec").unwrap();
        let a = s.write(&tag(1), b"one", true).unwrap();
        let b = s.write(&tag(2), b"two", true).unwrap();
        assert_ne!(a, b);
        // Written again for the same attempt: the same slot.
        assert_eq!(s.write(&tag(1), b"uno", true).unwrap(), a);
        s.clear(&tag(1)).unwrap();
        s.clear(&tag(1)).unwrap();
        assert!(!holds_record(fs::metadata(&a).unwrap().len()));
        // The emptied slot takes the next record; no third file is made.
        assert_eq!(s.write(&tag(3), b"three", false).unwrap(), a);
        assert_eq!(files(dir.path()), vec!["slot-0.rec", "slot-1.rec"]);
        let filled: Vec<Vec<u8>> = s.filled().unwrap().into_iter().map(|(_, b)| b).collect();
        assert_eq!(filled, vec![b"three".to_vec(), b"two".to_vec()]);
    }

    #[test]
    fn a_record_written_again_leaves_no_tail_of_the_longer_one_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::open(dir.path(), "rec").unwrap();
        let a = s.write(&tag(1), b"a long first record", true).unwrap();
        assert_eq!(s.write(&tag(1), b"short", true).unwrap(), a);
        assert_eq!(fs::read(&a).unwrap(), b"short");
        s.clear(&tag(1)).unwrap();
        // A free slot, one byte long, is written over whole.
        assert_eq!(s.write(&tag(2), b"next", false).unwrap(), a);
        assert_eq!(fs::read(&a).unwrap(), b"next");
    }

    /// Emptying keeps the slot's data block: ext4 frees (and with `discard`, trims) the block
    /// of a file cut to nothing, and allocates one again for the next record.
    #[test]
    fn an_emptied_slot_keeps_its_data_block() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::open(dir.path(), "rec").unwrap();
        let a = s.write(&tag(1), b"one record", true).unwrap();
        let blocks = fs::metadata(&a).unwrap().blocks();
        s.clear(&tag(1)).unwrap();
        let emptied = fs::metadata(&a).unwrap();
        assert!(!holds_record(emptied.len()));
        assert_eq!(
            emptied.blocks(),
            blocks,
            "the emptied slot gave its block back"
        );
        // Reopened, the emptied slot is free and nothing in it is read as a record.
        let s = Slots::open(dir.path(), "rec").unwrap();
        assert!(s.filled().unwrap().is_empty());
        assert_eq!(s.write(&tag(2), b"two", true).unwrap(), a);
    }

    #[test]
    fn a_reopened_directory_reuses_its_empty_slots_and_keeps_the_filled_ones() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Slots::open(dir.path(), "rec").unwrap();
            s.write(&tag(1), b"one", true).unwrap();
            s.write(&tag(2), b"two", true).unwrap();
            s.clear(&tag(1)).unwrap();
        }
        // A file of the earlier layout is read too, and deleted when cleared.
        fs::write(dir.path().join("c__T1.r0.a__a9.rec"), b"nine").unwrap();
        let s = Slots::open(dir.path(), "rec").unwrap();
        let filled = s.filled().unwrap();
        assert_eq!(
            filled.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>(),
            vec![b"two".to_vec(), b"nine".to_vec()]
        );
        s.adopt(tag(2), filled[0].0.clone()).unwrap();
        s.adopt(tag(9), filled[1].0.clone()).unwrap();
        // The free slot 0 is taken first; the filled slot 1 is not.
        assert_eq!(
            s.write(&tag(3), b"three", true).unwrap(),
            dir.path().join("slot-0.rec")
        );
        s.clear(&tag(9)).unwrap();
        s.clear(&tag(2)).unwrap();
        assert_eq!(files(dir.path()), vec!["slot-0.rec", "slot-1.rec"]);
        assert_eq!(
            s.write(&tag(4), b"four", true).unwrap(),
            dir.path().join("slot-1.rec")
        );
    }
}
