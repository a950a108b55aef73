//! The worker's journal of the leases it holds: one small record per token, in a
//! [slot](crate::slots) of `leases/` under the outbox directory, written when an assignment
//! arrives and emptied when the trial leaves the worker (acknowledged, given back or
//! abandoned).
//!
//! A restarted worker (same outbox) reads it to learn which leases its previous process held.
//! Those whose outcome is in the outbox are replayed; the rest can never be published, so the
//! worker forfeits them and the coordinator takes them back at once instead of waiting out
//! their deadline and publish grace.
//!
//! Entries are not fsynced: the journal only speeds recovery up. An entry lost with the page
//! cache (a machine crash) means that lease waits out its deadline, as it would without one.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use lanes_common::ids::{AttemptTag, CampaignId, Token};
use lanes_common::lease::LeaseSecret;

use crate::slots::{Slots, Unreadable};

/// One held lease.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Held {
    pub campaign: CampaignId,
    pub token: Token,
    /// The lease secret, needed to forfeit the lease. The journal is as private as the
    /// outbox (see the security docs).
    #[serde(default)]
    pub lease: LeaseSecret,
}

impl Held {
    /// The attempt this lease is for.
    pub fn tag(&self) -> AttemptTag {
        AttemptTag::new(self.campaign.clone(), self.token.clone())
    }
}

#[derive(Debug, Clone)]
pub struct LeaseJournal {
    slots: Slots,
}

impl LeaseJournal {
    /// The journal that belongs to an outbox directory.
    pub fn open(outbox: &Path) -> io::Result<Self> {
        // Secrets: the owner only, like the outbox.
        Ok(Self {
            slots: Slots::open(&outbox.join("leases"), "lease")?,
        })
    }

    pub fn add(&self, tag: &AttemptTag, lease: &LeaseSecret) -> io::Result<()> {
        let held = Held {
            campaign: tag.campaign.clone(),
            token: tag.token.clone(),
            lease: lease.clone(),
        };
        let bytes = serde_json::to_vec(&held).map_err(io::Error::other)?;
        self.slots.write(tag, &bytes, false).map(drop)
    }

    /// A missing entry is fine (removed twice).
    pub fn remove(&self, tag: &AttemptTag) -> io::Result<()> {
        self.slots.clear(tag)
    }

    /// Every entry, in attempt order; read once at start, it also learns where each is. An
    /// unreadable one (a torn write) is emptied: its lease then simply waits out its
    /// deadline.
    pub fn held(&self) -> io::Result<Vec<Held>> {
        self.slots
            .read_back("lease journal entry", Held::tag, Unreadable::Empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::TrialId;

    fn token(attempt: u32) -> Token {
        Token {
            trial_id: TrialId::new("T1.r0.a").unwrap(),
            attempt,
        }
    }

    fn tag(campaign: &str, attempt: u32) -> AttemptTag {
        AttemptTag::new(CampaignId::new(campaign).unwrap(), token(attempt))
    }

    #[test]
    fn held_leases_survive_a_restart_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let c = CampaignId::new("c").unwrap();
        {
            let j = LeaseJournal::open(dir.path()).unwrap();
            j.add(&tag("c", 1), &LeaseSecret::new("s1")).unwrap();
            j.add(&tag("c", 2), &LeaseSecret::new("s2")).unwrap();
            j.remove(&tag("c", 1)).unwrap();
            j.remove(&tag("c", 1)).unwrap();
        }
        // Torn writes: a file of an earlier version, and a slot.
        std::fs::write(dir.path().join("leases/torn.lease"), b"{\"camp").unwrap();
        std::fs::write(dir.path().join("leases/slot-7.lease"), b"{\"camp").unwrap();
        let j = LeaseJournal::open(dir.path()).unwrap();
        assert_eq!(
            j.held().unwrap(),
            vec![Held {
                campaign: c,
                token: token(2),
                lease: LeaseSecret::new("s2"),
            }]
        );
        assert!(!dir.path().join("leases/torn.lease").exists());
        // The torn slot is emptied.
        let torn = std::fs::metadata(dir.path().join("leases/slot-7.lease")).unwrap();
        assert!(!crate::slots::holds_record(torn.len()));
    }

    #[test]
    fn campaigns_sharing_a_token_hold_separate_leases() {
        let dir = tempfile::tempdir().unwrap();
        let j = LeaseJournal::open(dir.path()).unwrap();
        for (c, s) in [("a", "sa"), ("b", "sb"), ("a-b", "sab")] {
            j.add(&tag(c, 1), &LeaseSecret::new(s)).unwrap();
        }
        j.remove(&tag("a", 1)).unwrap();
        let held: Vec<(AttemptTag, LeaseSecret)> = j
            .held()
            .unwrap()
            .into_iter()
            .map(|h| (h.tag(), h.lease))
            .collect();
        assert_eq!(
            held,
            vec![
                (tag("a-b", 1), LeaseSecret::new("sab")),
                (tag("b", 1), LeaseSecret::new("sb")),
            ]
        );
    }
}
