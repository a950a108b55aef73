//! `packed_entry`: a Redis stream entry's packed items (`store::redis::packed`), as the
//! ledger reader unpacks them from whatever Redis holds.
//!
//! - The input as a stored block: unpacking never panics nor allocates past its bound, and
//!   what unpacks holds at most an entry's items and packs again into a block that unpacks
//!   the same.
//! - The input as the makings of items (`arbitrary`): they pack into a block that unpacks to
//!   them.

use arbitrary::{Arbitrary, Unstructured};
use lanes_coordinator::store::redis::packed::{self, MAX_ITEMS, MAX_UNPACKED};

pub fn fuzz_one(data: &[u8]) {
    stored(data);
    let _ = made(&mut Unstructured::new(data));
}

fn stored(block: &[u8]) {
    let Ok(items) = packed::unpack(block) else {
        return;
    };
    assert!(!items.is_empty() && items.len() <= MAX_ITEMS);
    let bytes: usize = items.iter().map(|(_, b)| 12 + b.len()).sum();
    assert!(bytes <= MAX_UNPACKED);
    let again = packed::pack(items.iter().map(|(s, b)| (*s, b.as_slice())));
    assert_eq!(
        packed::unpack(&again).expect("a packed block unpacks"),
        items
    );
}

fn made(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let items: Vec<(u64, Vec<u8>)> = Vec::arbitrary(u)?;
    if items.is_empty() || items.len() > MAX_ITEMS {
        return Ok(());
    }
    let block = packed::pack(items.iter().map(|(s, b)| (*s, b.as_slice())));
    assert_eq!(
        packed::unpack(&block).expect("a packed block unpacks"),
        items
    );
    Ok(())
}
