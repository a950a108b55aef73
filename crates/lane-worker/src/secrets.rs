//! An attempt's secret values and their scrubbing: from free text (rows, log lines, error
//! messages) and from a byte stream (a driver's stderr) in which a secret may be split
//! across two reads.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// What a secret value is replaced with.
pub const MASK: &str = "***";

/// Values shorter than this are not treated as secrets: scrubbing them would mangle ordinary
/// text.
pub const MIN_SECRET_LEN: usize = 4;

/// A set of secret values, longest first (so a secret that contains another is masked whole).
/// `Debug` prints only how many there are.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(Vec<String>);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} values)", self.0.len())
    }
}

impl Secrets {
    /// The values at least [`MIN_SECRET_LEN`] bytes long, deduplicated.
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut s = Self::default();
        s.add(values);
        s
    }

    /// Adds values (short ones are skipped).
    pub fn add(&mut self, values: impl IntoIterator<Item = String>) {
        self.0
            .extend(values.into_iter().filter(|v| v.len() >= MIN_SECRET_LEN));
        self.0
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.0.dedup();
    }

    /// Both sets.
    pub fn union(&self, other: &Secrets) -> Secrets {
        let mut s = self.clone();
        s.add(other.0.iter().cloned());
        s
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The length of the longest value, in bytes.
    fn longest(&self) -> usize {
        self.0.first().map_or(0, String::len)
    }

    /// How many bytes at the end of `bytes` could be the start of a secret cut off by the end.
    fn cut_off_at_end(&self, bytes: &[u8]) -> usize {
        let most = self.longest().saturating_sub(1).min(bytes.len());
        (1..=most)
            .rev()
            .find(|&k| {
                let end = &bytes[bytes.len() - k..];
                self.0.iter().any(|s| s.as_bytes().starts_with(end))
            })
            .unwrap_or(0)
    }

    /// Masks every secret in `text`.
    pub fn scrub(&self, text: &mut String) {
        for s in &self.0 {
            if text.contains(s.as_str()) {
                *text = text.replace(s.as_str(), MASK);
            }
        }
    }

    /// `text` with every secret masked.
    pub fn scrubbed(&self, text: &str) -> String {
        let mut t = text.to_owned();
        self.scrub(&mut t);
        t
    }

    /// Masks every secret in raw bytes (which need not be UTF-8).
    pub fn scrub_bytes(&self, bytes: &mut Vec<u8>) {
        for s in &self.0 {
            let needle = s.as_bytes();
            if let Some(first) = find(bytes, needle, 0) {
                let mut out = Vec::with_capacity(bytes.len());
                let mut from = 0;
                let mut at = Some(first);
                while let Some(i) = at {
                    out.extend_from_slice(&bytes[from..i]);
                    out.extend_from_slice(MASK.as_bytes());
                    from = i + needle.len();
                    at = find(bytes, needle, from);
                }
                out.extend_from_slice(&bytes[from..]);
                *bytes = out;
            }
        }
    }
}

/// The lease secrets this worker holds, shared by its supervisor (which alone sees them, and
/// adds and removes them) and its lanes, which mask them in everything a driver says: a
/// driver that reads another lane's lease (from a file it should not reach, or from memory)
/// must not get it into a row or an artifact. A lease may leave the worker while a driver
/// that read it is still running, so an attempt masks what it [`watch`](Self::watch)es: every
/// lease held at any time since it began. Counted, since two leases never share a secret but
/// a secret is added once per attempt and may be removed twice.
#[derive(Clone, Default)]
pub struct HeldLeases(Arc<Mutex<Leases>>);

#[derive(Default)]
struct Leases {
    held: BTreeMap<String, usize>,
    /// Secrets that left the worker while some attempt watched, numbered by `releases`.
    released: VecDeque<(u64, String)>,
    releases: u64,
    /// How many watches began at each release number.
    watches: BTreeMap<u64, usize>,
}

impl Leases {
    /// Forgets the released secrets no watch began before.
    fn prune(&mut self) {
        let oldest = self.watches.keys().next().copied().unwrap_or(u64::MAX);
        while self.released.front().is_some_and(|(n, _)| *n < oldest) {
            self.released.pop_front();
        }
    }
}

impl fmt::Debug for HeldLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.lock();
        write!(
            f,
            "HeldLeases({} values, {} released)",
            m.held.len(),
            m.released.len()
        )
    }
}

impl HeldLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A lease is held from now on.
    pub fn hold(&self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        *self.lock().held.entry(secret.to_owned()).or_default() += 1;
    }

    /// A lease left the worker. Its secret stays masked for the attempts that watch.
    pub fn release(&self, secret: &str) {
        let mut m = self.lock();
        let Some(n) = m.held.get_mut(secret) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            m.held.remove(secret);
            if !m.watches.is_empty() {
                let at = m.releases;
                m.released.push_back((at, secret.to_owned()));
                m.releases += 1;
            }
        }
    }

    /// Every secret held now.
    pub fn secrets(&self) -> Secrets {
        Secrets::new(self.lock().held.keys().cloned())
    }

    /// Starts watching: until the watch is dropped, its [`LeaseWatch::secrets`] include every
    /// lease held at any time since now.
    pub fn watch(&self) -> LeaseWatch {
        let mut m = self.lock();
        let from = m.releases;
        *m.watches.entry(from).or_default() += 1;
        LeaseWatch {
            leases: self.clone(),
            from,
        }
    }
}

/// What one attempt masks of the worker's leases; see [`HeldLeases::watch`].
pub struct LeaseWatch {
    leases: HeldLeases,
    from: u64,
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseWatch(from release {})", self.from)
    }
}

impl LeaseWatch {
    /// The leases held now and those released since the watch began.
    pub fn secrets(&self) -> Secrets {
        let m = self.leases.lock();
        let released = m
            .released
            .iter()
            .filter(|(n, _)| *n >= self.from)
            .map(|(_, s)| s.clone());
        Secrets::new(m.held.keys().cloned().chain(released))
    }
}

impl Drop for LeaseWatch {
    fn drop(&mut self) {
        let mut m = self.leases.lock();
        if let Some(n) = m.watches.get_mut(&self.from) {
            *n -= 1;
            if *n == 0 {
                m.watches.remove(&self.from);
            }
        }
        m.prune();
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Scrubs a stream fed in pieces: it holds back the bytes at the end of a piece that could be
/// the start of a secret, until the next piece (or the end) shows whether they are.
#[derive(Debug, Default)]
pub struct StreamScrubber {
    held: Vec<u8>,
}

impl StreamScrubber {
    /// Feeds the next piece; answers what may be written now, scrubbed.
    pub fn feed(&mut self, secrets: &Secrets, piece: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(piece);
        if secrets.is_empty() {
            return buf;
        }
        secrets.scrub_bytes(&mut buf);
        let keep = secrets.cut_off_at_end(&buf);
        self.held = buf.split_off(buf.len() - keep);
        buf
    }

    /// The end of the stream: everything held back, scrubbed.
    pub fn finish(&mut self, secrets: &Secrets) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        secrets.scrub_bytes(&mut buf);
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_leases_are_masked_until_every_hold_is_released() {
        let held = HeldLeases::default();
        held.hold("lease-one-0123");
        held.hold("lease-two-4567");
        held.hold("lease-one-0123");
        held.hold("");
        let said = "got lease-one-0123 and lease-two-4567";
        assert_eq!(held.secrets().scrubbed(said), "got *** and ***");
        held.release("lease-one-0123");
        held.release("lease-two-4567");
        held.release("lease-two-4567");
        assert_eq!(held.secrets().scrubbed(said), "got *** and lease-two-4567");
        assert_eq!(format!("{held:?}"), "HeldLeases(1 values, 0 released)");
    }

    /// A driver may read a lease and say it after the lease left the worker: an attempt masks
    /// every lease held since it began, and the worker forgets a released lease once no
    /// attempt that began before its release is left.
    #[test]
    fn an_attempt_masks_leases_released_while_it_ran() {
        let held = HeldLeases::default();
        held.hold("lease-old-0000");
        held.release("lease-old-0000");
        held.hold("lease-one-0123");
        let first = held.watch();
        held.hold("lease-two-4567");
        held.release("lease-one-0123");
        let second = held.watch();
        held.release("lease-two-4567");
        let said = "lease-old-0000 lease-one-0123 lease-two-4567";
        assert_eq!(first.secrets().scrubbed(said), "lease-old-0000 *** ***");
        assert_eq!(
            second.secrets().scrubbed(said),
            "lease-old-0000 lease-one-0123 ***"
        );
        assert_eq!(held.secrets().scrubbed(said), said);
        assert_eq!(format!("{held:?}"), "HeldLeases(0 values, 2 released)");
        drop(first);
        assert_eq!(format!("{held:?}"), "HeldLeases(0 values, 1 released)");
        drop(second);
        assert_eq!(format!("{held:?}"), "HeldLeases(0 values, 0 released)");
        // With no watch, nothing released is kept.
        held.hold("lease-three-89ab");
        held.release("lease-three-89ab");
        assert_eq!(format!("{held:?}"), "HeldLeases(0 values, 0 released)");
    }

    fn secrets(v: &[&str]) -> Secrets {
        Secrets::new(v.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn text_is_scrubbed_longest_first_and_short_values_are_no_secrets() {
        let s = secrets(&["hunter2", "hunter22x", "abc"]);
        assert_eq!(s.scrubbed("a hunter22x b hunter2 abc"), "a *** b *** abc");
        let mut bytes = b"\xffhunter2\xfe".to_vec();
        s.scrub_bytes(&mut bytes);
        assert_eq!(bytes, b"\xff***\xfe");
        assert_eq!(format!("{s:?}"), "Secrets(2 values)");
    }

    #[test]
    fn a_secret_split_across_pieces_is_still_masked() {
        let s = secrets(&["SECRET-1234"]);
        let text = b"before SECRET-1234 middle SECRET-1234 after SECRET-12";
        // Every way of cutting the stream in two, and one byte at a time.
        for cut in 0..text.len() {
            let mut sc = StreamScrubber::default();
            let mut out = sc.feed(&s, &text[..cut]);
            out.extend(sc.feed(&s, &text[cut..]));
            out.extend(sc.finish(&s));
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "before *** middle *** after SECRET-12",
                "cut at {cut}"
            );
        }
        let mut sc = StreamScrubber::default();
        let mut out = Vec::new();
        for b in text {
            out.extend(sc.feed(&s, std::slice::from_ref(b)));
        }
        out.extend(sc.finish(&s));
        assert!(!String::from_utf8(out).unwrap().contains("SECRET-1234"));
    }
}
