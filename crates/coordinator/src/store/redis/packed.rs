//! A layout 4 stream entry's body: the items one commit wrote to a stream (rows or events,
//! each a JSON value under its seq), packed into one LZ4 block, stored as the entry's only
//! field, [`FIELD`].
//!
//! Rows and events repeat their field names and most of their values from item to item, so
//! a commit's items compress several times over: Redis copies, appends to its AOF, syncs and
//! keeps that much less per trial. Before compression the items follow each other as
//! `seq` (u64, little-endian), `len` (u32, little-endian) and `len` bytes of body; the block
//! starts with the unpacked size (u32, little-endian), as `lz4_flex` prepends it.

use super::keys::ENTRY_ITEMS;

/// Items an entry holds at most.
pub const MAX_ITEMS: usize = ENTRY_ITEMS;

/// The field of a packed entry.
pub const FIELD: &str = "z";

/// Bytes before each item's body: its seq and its length.
const HEAD: usize = 12;

/// LZ4 never expands more than this: a larger unpacked size than the block's length allows
/// is corrupt, refused before anything is allocated for it.
const MAX_RATIO: usize = 255;

/// The most an entry unpacks to: a thousand items of 256 KiB each, far past any row or
/// event. A larger size prefix is corrupt, refused before anything is allocated for it.
pub const MAX_UNPACKED: usize = 256 * 1024 * 1024;

/// Why a packed entry could not be read: the stored data is corrupt.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum UnpackError {
    #[error("its block is shorter than its size prefix")]
    Short,
    #[error(
        "its block says it unpacks to {size} bytes, more than {len} packed bytes can hold or \
         an entry may"
    )]
    TooLarge { size: usize, len: usize },
    #[error("its block does not decompress: {0}")]
    Lz4(String),
    #[error("an item is cut off at byte {at}")]
    Cut { at: usize },
    #[error("it holds no item")]
    Empty,
    #[error("it holds more than {max} items")]
    TooMany { max: usize },
}

/// Packs `items` (in the order given) into one block. The committer packs at most
/// [`ENTRY_ITEMS`] rows or events, each far below Redis's 512 MB value limit, so the block's
/// 32-bit sizes always fit.
pub fn pack<'a>(items: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<u8> {
    let mut raw = Vec::new();
    for (seq, body) in items {
        let len = u32::try_from(body.len()).expect("a stream item under 4 GiB");
        raw.reserve(HEAD + body.len());
        raw.extend_from_slice(&seq.to_le_bytes());
        raw.extend_from_slice(&len.to_le_bytes());
        raw.extend_from_slice(body);
    }
    assert!(
        raw.len() <= MAX_UNPACKED,
        "a stream entry over {MAX_UNPACKED} bytes"
    );
    lz4_flex::compress_prepend_size(&raw)
}

/// The items of a block [`pack`] wrote, in the order they were packed: at most
/// [`ENTRY_ITEMS`], unpacked to at most [`MAX_UNPACKED`] bytes. Anything else is corrupt.
pub fn unpack(block: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, UnpackError> {
    let (prefix, packed) = block.split_first_chunk::<4>().ok_or(UnpackError::Short)?;
    let size = u32::from_le_bytes(*prefix) as usize;
    if size > packed.len().saturating_mul(MAX_RATIO) || size > MAX_UNPACKED {
        return Err(UnpackError::TooLarge {
            size,
            len: packed.len(),
        });
    }
    let raw =
        lz4_flex::decompress_size_prepended(block).map_err(|e| UnpackError::Lz4(e.to_string()))?;
    let mut items = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        if items.len() == ENTRY_ITEMS {
            return Err(UnpackError::TooMany { max: ENTRY_ITEMS });
        }
        let cut = UnpackError::Cut { at };
        let head = raw.get(at..at.saturating_add(HEAD)).ok_or(cut.clone())?;
        let (seq, len) = head.split_at(8);
        let seq = u64::from_le_bytes(seq.try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let end = (at + HEAD).saturating_add(len);
        let body = raw.get(at + HEAD..end).ok_or(cut)?;
        items.push((seq, body.to_vec()));
        at = end;
    }
    if items.is_empty() {
        return Err(UnpackError::Empty);
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_round_trip_and_repeated_json_packs_small() {
        let bodies: Vec<(u64, Vec<u8>)> = (40..60)
            .map(|seq| {
                let row = format!(
                    "{{\"schema\":\"lanes-row/1\",\"seq\":{seq},\"status\":\"completed\",\"score\":null}}"
                );
                (seq, row.into_bytes())
            })
            .collect();
        let block = pack(bodies.iter().map(|(s, b)| (*s, b.as_slice())));
        assert_eq!(unpack(&block).expect("unpacks"), bodies);
        let raw: usize = bodies.iter().map(|(_, b)| b.len()).sum();
        assert!(block.len() * 3 < raw, "{} packed from {raw}", block.len());
        // An empty body is an item too.
        let one = pack([(7, &b""[..])]);
        assert_eq!(unpack(&one).expect("unpacks"), vec![(7, Vec::new())]);
    }

    /// The stored form is the layout: a block this layout wrote must unpack the same in every
    /// later build, and what is packed must be laid out as documented (the compressed bytes
    /// themselves may differ between LZ4 encoders; any of them decodes the same).
    #[test]
    fn the_stored_form_is_pinned() {
        let raw: Vec<u8> = [
            &5u64.to_le_bytes()[..],
            &2u32.to_le_bytes(),
            b"ab",
            &6u64.to_le_bytes(),
            &0u32.to_le_bytes(),
        ]
        .concat();
        let block = pack([(5, &b"ab"[..]), (6, &b""[..])]);
        assert_eq!(
            lz4_flex::decompress_size_prepended(&block).expect("an LZ4 block"),
            raw
        );
        // Written by this layout's first build: the size (26, u32 LE), then the LZ4 block.
        let stored: &[u8] = &[
            26, 0, 0, 0, 240, 11, 5, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 97, 98, 6, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0,
        ];
        assert_eq!(
            unpack(stored).expect("unpacks"),
            vec![(5, b"ab".to_vec()), (6, Vec::new())]
        );
    }

    #[test]
    fn corrupt_blocks_are_refused_not_trusted() {
        let block = pack([(1, &b"{\"a\":1}"[..]), (2, &b"{\"b\":2}"[..])]);
        assert_eq!(unpack(&block[..3]), Err(UnpackError::Short));
        assert_eq!(unpack(&[]), Err(UnpackError::Short));
        // A size prefix no block of that length can unpack to: nothing allocated for it.
        let mut huge = block.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            unpack(&huge),
            Err(UnpackError::TooLarge { size, .. }) if size == u32::MAX as usize
        ));
        let mut truncated = block.clone();
        truncated.truncate(block.len() - 2);
        assert!(matches!(unpack(&truncated), Err(UnpackError::Lz4(_))));
        // Well-formed LZ4 whose items run past its end, or that holds none.
        let cut = lz4_flex::compress_prepend_size(&[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, b'x']);
        assert_eq!(unpack(&cut), Err(UnpackError::Cut { at: 0 }));
        let short_head = lz4_flex::compress_prepend_size(&[1, 2, 3]);
        assert_eq!(unpack(&short_head), Err(UnpackError::Cut { at: 0 }));
        let empty = lz4_flex::compress_prepend_size(&[]);
        assert_eq!(unpack(&empty), Err(UnpackError::Empty));
        // A size past what an entry may hold, even where a block that long could unpack to it
        // (refused before decompressing: what follows the prefix does not matter).
        let mut block = ((MAX_UNPACKED + 1) as u32).to_le_bytes().to_vec();
        block.resize(4 + MAX_UNPACKED / MAX_RATIO + 1, 0);
        assert!(matches!(
            unpack(&block),
            Err(UnpackError::TooLarge { size, .. }) if size == MAX_UNPACKED + 1
        ));
        // More items than an entry holds.
        let many: Vec<(u64, &[u8])> = (0..=ENTRY_ITEMS as u64).map(|s| (s, &b"{}"[..])).collect();
        assert_eq!(
            unpack(&pack(many)),
            Err(UnpackError::TooMany { max: ENTRY_ITEMS })
        );
    }
}
