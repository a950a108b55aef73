//! Store layout versions: what each backend records about the shape of its data, the error a
//! coordinator gives for a layout it does not know, and what `lanes store migrate` reports.
//!
//! Each backend counts its own layouts: Redis records its layout in the key `lanes:layout`,
//! the embedded store in the redb table `layout`. A fresh store is stamped with the current
//! layout when it is opened; a store with data but no record is of the layout written before
//! layouts were recorded (layout 1 on both backends).

use std::fmt;
use std::path::PathBuf;

/// The layout the Redis backend writes: 2 since the campaign meta is stored in parts, 3 since
/// a stream entry holds every item one commit wrote to its stream, 4 since those items are
/// packed into one compressed field, 5 since trial states, leases, token records and block
/// states are stored in a binary encoding instead of JSON, 6 since a trial's lease and token
/// records are folded into its record.
pub const REDIS_LAYOUT: u32 = 6;
/// The layout the embedded backend writes: 2 since a block's started phase-2 verdict is
/// stored as `"started"` (layout 1 wrote `null`, which read back as no verdict). Layout 1
/// files are read as they are and stamped 2 when opened.
pub const EMBEDDED_LAYOUT: u32 = 2;
/// The layout of a store with data but no layout record (both backends).
pub const UNVERSIONED_LAYOUT: u32 = 1;

/// Which store, named the way `lanes store migrate` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAt {
    /// A Redis URL, with any password already masked.
    Redis(String),
    /// A Redis master found through Sentinels.
    RedisSentinel {
        /// `HOST:PORT,…` of the Sentinels.
        sentinels: String,
        /// The master's name.
        master: String,
    },
    /// The embedded store's data directory.
    Embedded(PathBuf),
}

impl StoreAt {
    /// A Redis store, named by `url` with its password masked (it may end up in logs).
    pub fn redis(url: &str) -> Self {
        Self::Redis(mask_password(url))
    }

    /// The command that upgrades this store.
    pub fn migrate_command(&self) -> String {
        match self {
            StoreAt::Redis(url) => format!("lanes store migrate --redis {url}"),
            StoreAt::RedisSentinel { sentinels, master } => {
                format!("lanes store migrate --redis-sentinel {sentinels} --redis-master {master}")
            }
            StoreAt::Embedded(dir) => format!("lanes store migrate --data-dir {}", dir.display()),
        }
    }
}

impl fmt::Display for StoreAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreAt::Redis(url) => write!(f, "the Redis store at {url}"),
            StoreAt::RedisSentinel { sentinels, master } => write!(
                f,
                "the Redis store of master {master:?} (sentinels {sentinels})"
            ),
            StoreAt::Embedded(dir) => write!(f, "the embedded store in {}", dir.display()),
        }
    }
}

/// `redis://user:secret@host/` -> `redis://user:***@host/`; a URL without a password as is.
pub(crate) fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let host_start = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..host_start].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// A store whose layout this coordinator cannot use as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// An older layout, which `lanes store migrate` upgrades.
    #[error(
        "{store} has layout {found}, this coordinator uses layout {current}: stop every \
         coordinator on it, then run `{}`",
        store.migrate_command()
    )]
    Older {
        store: StoreAt,
        found: u32,
        current: u32,
    },
    /// A layout written by a newer coordinator.
    #[error(
        "{store} has layout {found}, which is newer than this coordinator's layout {current}: \
         upgrade the coordinator"
    )]
    Newer {
        store: StoreAt,
        found: u32,
        current: u32,
    },
}

impl LayoutError {
    /// The error for a store of layout `found` when the code uses `current`; `None` when they
    /// are the same.
    pub fn check(store: &StoreAt, found: u32, current: u32) -> Option<Self> {
        let store = store.clone();
        match found.cmp(&current) {
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Less => Some(Self::Older {
                store,
                found,
                current,
            }),
            std::cmp::Ordering::Greater => Some(Self::Newer {
                store,
                found,
                current,
            }),
        }
    }
}

/// What a store's layout record said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// No data and no record: a fresh store.
    Empty,
    /// Data but no record: the layout from before layouts were recorded.
    Unversioned,
    /// The recorded layout.
    Layout(u32),
}

impl Recorded {
    /// The layout of the data; `None` for an empty store.
    pub fn layout(self) -> Option<u32> {
        match self {
            Recorded::Empty => None,
            Recorded::Unversioned => Some(UNVERSIONED_LAYOUT),
            Recorded::Layout(n) => Some(n),
        }
    }
}

/// What `lanes store migrate` did (or, with `dry_run`, would do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub store: StoreAt,
    /// The record found.
    pub recorded: Recorded,
    /// The layout the store is at afterwards (would be, on a dry run).
    pub to: u32,
    /// Campaigns rewritten (to rewrite) into the new layout.
    pub migrated: Vec<String>,
    /// Campaigns already in the new layout (left by an interrupted migration).
    pub already: usize,
    pub dry_run: bool,
}

impl MigrationReport {
    /// Whether the store needed (needs) any write.
    pub fn changes(&self) -> bool {
        self.recorded != Recorded::Layout(self.to)
    }
}

impl fmt::Display for MigrationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.changes() {
            return write!(
                f,
                "{} is already at layout {}: nothing to do",
                self.store, self.to
            );
        }
        let (did, stamped) = if self.dry_run {
            ("would migrate", "would be stamped")
        } else {
            ("migrated", "stamped")
        };
        match self.recorded.layout() {
            None => write!(
                f,
                "{}: empty, {stamped} with layout {}",
                self.store, self.to
            ),
            Some(from) if from == self.to => write!(
                f,
                "{}: layout {from} without a record, {stamped} with layout {}",
                self.store, self.to
            ),
            Some(from) if self.migrated.is_empty() && self.already == 0 => {
                write!(
                    f,
                    "{}: layout {from} -> {}: no campaign to rewrite, {stamped} with layout {}",
                    self.store, self.to, self.to
                )?;
                if self.dry_run {
                    write!(f, " (dry run: nothing written)")?;
                }
                Ok(())
            }
            Some(from) => {
                write!(
                    f,
                    "{}: layout {from} -> {}: {did} {} campaign(s)",
                    self.store,
                    self.to,
                    self.migrated.len()
                )?;
                if self.already > 0 {
                    write!(f, ", {} already migrated", self.already)?;
                }
                if self.dry_run {
                    write!(f, " (dry run: nothing written)")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows() {
        assert_eq!(
            mask_password("redis://:hunter2@db:6379/0"),
            "redis://:***@db:6379/0"
        );
        assert_eq!(
            mask_password("rediss://u:p@w@db/"),
            "rediss://u:***@db/",
            "the last @ before the path ends the user info"
        );
        assert_eq!(mask_password("redis://db:6379/"), "redis://db:6379/");
        assert_eq!(mask_password("redis://u@db/"), "redis://u@db/");
        assert_eq!(mask_password("not a url"), "not a url");
    }

    #[test]
    fn the_messages_name_both_layouts_and_what_to_do() {
        let at = StoreAt::redis("redis://:pw@h:1/");
        let older = LayoutError::check(&at, 1, 2).expect("older");
        assert_eq!(
            older.to_string(),
            "the Redis store at redis://:***@h:1/ has layout 1, this coordinator uses layout 2: \
             stop every coordinator on it, then run `lanes store migrate --redis redis://:***@h:1/`"
        );
        let newer = LayoutError::check(&StoreAt::Embedded("/d".into()), 3, 1).expect("newer");
        assert_eq!(
            newer.to_string(),
            "the embedded store in /d has layout 3, which is newer than this coordinator's \
             layout 1: upgrade the coordinator"
        );
        assert_eq!(LayoutError::check(&at, 2, 2), None);
    }
}
