//! Lease secrets: what binds an attempt's lease to the worker that claimed it.
//!
//! A claim hands the worker a secret beside each token. Renewals, outcomes, releases and
//! forfeits are accepted only with that secret and only from the worker it was issued to, so
//! another session that guesses a token (tokens are readable: `<trial>#a<n>`) cannot publish
//! or renew for it.
//!
//! The secret is an HMAC-SHA256, under a key every coordinator replica reads from the shared
//! store, of the campaign, the token and the holder's worker id. The store keeps no per-lease
//! secret, and any replica verifies any secret. The secret is never logged: its `Debug` prints
//! `***`, and rows, events and status never carry it.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::ids::{CampaignId, Token};

/// Bytes of the store-wide key.
pub const KEY_BYTES: usize = 32;

/// The store-wide key lease secrets are derived with.
#[derive(Clone)]
pub struct LeaseKey([u8; KEY_BYTES]);

impl fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseKey(***)")
    }
}

/// A lease secret as carried on the wire: 64 lowercase hex digits (256 bits).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseSecret(String);

impl fmt::Debug for LeaseSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseSecret(***)")
    }
}

impl LeaseSecret {
    /// A secret as received (from the wire or a worker's own files).
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text to put on the wire. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// HMAC-SHA256 (RFC 2104); the key is at most one block, so it is only padded.
fn hmac_sha256(key: &[u8; KEY_BYTES], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Each field length-prefixed, so no two (campaign, token, worker) share a message.
fn message(campaign: &CampaignId, token: &Token, worker: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(128);
    m.extend_from_slice(b"lanes-lease-v1");
    for part in [
        campaign.as_str().as_bytes(),
        token.trial_id.as_str().as_bytes(),
        &token.attempt.to_be_bytes(),
        worker.as_bytes(),
    ] {
        m.extend_from_slice(&(part.len() as u64).to_be_bytes());
        m.extend_from_slice(part);
    }
    m
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let b = text.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

impl LeaseKey {
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        Self(bytes)
    }

    /// The key as stored (hex).
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// A stored key; `None` unless exactly [`KEY_BYTES`] bytes of lowercase hex.
    pub fn from_hex(text: &str) -> Option<Self> {
        unhex(text)?.try_into().ok().map(Self)
    }

    /// The secret of `token` of `campaign`, issued to `worker`.
    pub fn secret(&self, campaign: &CampaignId, token: &Token, worker: &str) -> LeaseSecret {
        LeaseSecret(hex(&hmac_sha256(
            &self.0,
            &message(campaign, token, worker),
        )))
    }

    /// Whether `given` is the secret of `token` issued to `worker`, in constant time.
    pub fn verify(
        &self,
        campaign: &CampaignId,
        token: &Token,
        worker: &str,
        given: &LeaseSecret,
    ) -> bool {
        let want = self.secret(campaign, token, worker);
        // Both sides are hashed first, so neither the content nor the length of `given`
        // shows in the time taken.
        let a: [u8; 32] = Sha256::digest(want.0.as_bytes()).into();
        let b: [u8; 32] = Sha256::digest(given.0.as_bytes()).into();
        a.ct_eq(&b).into()
    }
}

/// A key for another purpose (the dashboard's sessions), derived from the store-wide key so
/// every replica holds the same one without storing it, and kept apart from lease secrets by
/// its label.
#[derive(Clone)]
pub struct DerivedKey([u8; KEY_BYTES]);

impl fmt::Debug for DerivedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DerivedKey(***)")
    }
}

impl LeaseKey {
    /// The key for `label`; another label gives an unrelated key.
    pub fn derive(&self, label: &str) -> DerivedKey {
        DerivedKey(hmac_sha256(
            &self.0,
            format!("lanes-derive-v1:{label}").as_bytes(),
        ))
    }
}

impl DerivedKey {
    /// The HMAC-SHA256 of `message`, as 64 hex digits.
    pub fn mac(&self, message: &[u8]) -> String {
        hex(&hmac_sha256(&self.0, message))
    }

    /// Whether `given` is the MAC of `message`, in constant time.
    pub fn verify(&self, message: &[u8], given: &str) -> bool {
        let a: [u8; 32] = Sha256::digest(self.mac(message).as_bytes()).into();
        let b: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        a.ct_eq(&b).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TrialId;

    fn token(attempt: u32) -> Token {
        Token {
            trial_id: TrialId::new("t1.r0.a").unwrap(),
            attempt,
        }
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        // RFC 4231 test case 2 uses a 4-byte key; ours is fixed at 32, so check the HMAC
        // against a key padded the same way HMAC pads it (zeros to the block size).
        let mut key = [0u8; KEY_BYTES];
        key[..4].copy_from_slice(b"Jefe");
        assert_eq!(
            hex(&hmac_sha256(&key, b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn secrets_bind_campaign_token_and_worker() {
        let key = LeaseKey::from_bytes([7; KEY_BYTES]);
        let c = CampaignId::new("c1").unwrap();
        let s = key.secret(&c, &token(1), "w1");
        assert_eq!(s.expose().len(), 64);
        assert!(key.verify(&c, &token(1), "w1", &s));
        assert!(!key.verify(&c, &token(2), "w1", &s));
        assert!(!key.verify(&c, &token(1), "w2", &s));
        assert!(!key.verify(&CampaignId::new("c2").unwrap(), &token(1), "w1", &s));
        assert!(!key.verify(&c, &token(1), "w1", &LeaseSecret::default()));
        let other = LeaseKey::from_bytes([8; KEY_BYTES]);
        assert!(!other.verify(&c, &token(1), "w1", &s));
        assert_eq!(format!("{s:?}"), "LeaseSecret(***)");
        assert_eq!(format!("{key:?}"), "LeaseKey(***)");
    }

    #[test]
    fn derived_keys_are_apart_by_label_and_verify_their_macs() {
        let key = LeaseKey::from_bytes([7; KEY_BYTES]);
        let (a, b) = (key.derive("a"), key.derive("b"));
        let mac = a.mac(b"hello");
        assert_eq!(mac.len(), 64);
        assert!(a.verify(b"hello", &mac));
        assert!(!a.verify(b"hello!", &mac));
        assert!(!b.verify(b"hello", &mac));
        assert_eq!(format!("{a:?}"), "DerivedKey(***)");
    }

    #[test]
    fn keys_round_trip_as_hex() {
        let key = LeaseKey::from_bytes([0xab; KEY_BYTES]);
        let back = LeaseKey::from_hex(&key.to_hex()).unwrap();
        assert_eq!(back.0, key.0);
        assert!(LeaseKey::from_hex("abc").is_none());
        assert!(LeaseKey::from_hex(&"zz".repeat(32)).is_none());
        assert!(LeaseKey::from_hex(&"ab".repeat(31)).is_none());
    }
}
