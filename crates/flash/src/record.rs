//! One item on flash: a record, checksummed on its own, so that a flipped
//! byte or a torn write costs that record and never returns wrong bytes.
//!
//! ```text
//!  0        4        8                16       20       24
//! +--------+--------+----------------+--------+--------+----------------+
//! | crc32c | len    | epoch          | written| zero   | item bytes ... |
//! +--------+--------+----------------+--------+--------+----------------+
//! ```
//! - crc32c (Castagnoli) of bytes 4..len followed by the generation of
//!   the region the record is written in (8 bytes, not stored: the
//!   region's header names it). A record left on disk from another
//!   generation of its region fails its check like a damaged one, so a
//!   restart that keeps a region (its header names the generation a
//!   snapshot saved) never takes a later generation's record for one of
//!   the snapshot's, whatever a power loss kept ([`crate::log`]).
//! - len: header and item bytes, before padding to [`ALIGN`].
//! - epoch: the memory segment epoch the item was written in, for
//!   `flush_all` (items from segments opened before a flush are flushed).
//! - written: the item's write time (server seconds), for `mg`'s `l`/`h`/`t`.
//! - the item bytes are opaque here: the store's own item layout, with its
//!   CAS explicit.
//!
//! All little-endian. Records start at multiples of [`ALIGN`] bytes.

/// Bytes of a record header.
pub const HEADER_LEN: usize = 24;
/// Records start at multiples of this at least (the log's granule, a
/// power of two, may be larger).
pub const ALIGN: usize = 8;

/// A record read back and verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub epoch: u64,
    pub written: u32,
    pub item: &'a [u8],
}

/// Why bytes are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record header damaged or not a record")]
    BadHeader,
    #[error("record checksum mismatch")]
    Checksum,
    /// More bytes are needed: the record is this long.
    #[error("record needs {0} bytes")]
    Short(usize),
}

/// Bytes a record of an `item_len`-byte item takes, padded to `align`.
pub fn padded_len(item_len: usize, align: usize) -> usize {
    (HEADER_LEN + item_len).next_multiple_of(align.max(ALIGN))
}

/// Appends a record to `out`, padded to `align`; `item` writes the item's
/// bytes into the slice it is given, `item_len` long. Its checksum is not
/// yet salted: [`salt`] does that once the region is known.
pub fn encode(
    out: &mut Vec<u8>,
    align: usize,
    epoch: u64,
    written: u32,
    item_len: usize,
    item: impl FnOnce(&mut [u8]),
) {
    let start = out.len();
    let len = HEADER_LEN + item_len;
    out.resize(start + padded_len(item_len, align), 0);
    let r = &mut out[start..start + len];
    r[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    r[8..16].copy_from_slice(&epoch.to_le_bytes());
    r[16..20].copy_from_slice(&written.to_le_bytes());
    item(&mut r[HEADER_LEN..]);
    let crc = crc32c::crc32c(&r[4..]);
    r[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Salts the checksum of every record in `buf` (records as [`encode`]
/// wrote them, padded to `align`) with the generation `gen` of the region
/// they are about to be written in: four bytes a record, the item bytes
/// are not read again. Returns how many records it salted.
pub fn salt(buf: &mut [u8], align: usize, gen: u64) -> u64 {
    let mut n = 0;
    let mut off = 0;
    while let Some(len) = buf.get(off..).and_then(claimed_len) {
        let crc = u32::from_le_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]);
        let salted = crc32c::crc32c_append(crc, &gen.to_le_bytes());
        buf[off..off + 4].copy_from_slice(&salted.to_le_bytes());
        n += 1;
        off += len.next_multiple_of(align.max(ALIGN));
    }
    n
}

/// The length a record starting at `b` claims, if its header is readable.
pub fn claimed_len(b: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
    (len >= HEADER_LEN).then_some(len)
}

/// Verifies and parses the record at the start of `b`, at most `max`
/// bytes long, written in generation `gen` of its region.
pub fn decode(b: &[u8], max: usize, gen: u64) -> Result<Record<'_>, RecordError> {
    let len = claimed_len(b).filter(|&l| l <= max).ok_or(RecordError::BadHeader)?;
    if b.len() < len {
        return Err(RecordError::Short(len));
    }
    let r = &b[..len];
    let crc = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
    if crc32c::crc32c_append(crc32c::crc32c(&r[4..]), &gen.to_le_bytes()) != crc {
        return Err(RecordError::Checksum);
    }
    let epoch = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
    let written = u32::from_le_bytes([r[16], r[17], r[18], r[19]]);
    Ok(Record { epoch, written, item: &r[HEADER_LEN..] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_pinned_byte_for_byte() {
        let mut out = Vec::new();
        encode(&mut out, 8, 0x0102_0304_0506_0708, 0x0a0b_0c0d, 3, |d| d.copy_from_slice(b"abc"));
        assert_eq!(out.len(), 32, "24 + 3 padded to 8");
        assert_eq!(&out[4..8], &27u32.to_le_bytes());
        assert_eq!(&out[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&out[16..20], &[0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(&out[20..24], &[0; 4]);
        assert_eq!(&out[24..27], b"abc");
        assert_eq!(&out[0..4], &crc32c::crc32c(&out[4..27]).to_le_bytes());
        assert_eq!(salt(&mut out, 8, 77), 1);
        let salted = [&out[4..27], &77u64.to_le_bytes()[..]].concat();
        assert_eq!(&out[0..4], &crc32c::crc32c(&salted).to_le_bytes(), "the generation follows the bytes");
        let r = decode(&out, 1 << 20, 77).unwrap();
        assert_eq!(r, Record { epoch: 0x0102_0304_0506_0708, written: 0x0a0b_0c0d, item: b"abc" });
    }

    #[test]
    fn any_flipped_byte_is_caught_and_short_input_asks_for_more() {
        let mut out = Vec::new();
        encode(&mut out, 8, 7, 9, 40, |d| d.fill(b'x'));
        salt(&mut out, 8, 3);
        let len = HEADER_LEN + 40;
        for i in 0..len {
            let mut b = out.clone();
            b[i] ^= 0x10;
            assert!(decode(&b, 1 << 20, 3).is_err(), "flip at {i} undetected");
        }
        assert_eq!(decode(&out[..30], 1 << 20, 3), Err(RecordError::Short(len)));
        assert_eq!(decode(&out, 10, 3), Err(RecordError::BadHeader), "longer than allowed");
        assert_eq!(decode(&[0; 32], 1 << 20, 3), Err(RecordError::BadHeader), "zeros are no record");
    }

    #[test]
    fn a_record_of_another_generation_fails_its_check() {
        // Several records of several lengths in one buffer, as a batch.
        let mut out = Vec::new();
        for n in [1, 40, 300, 7] {
            encode(&mut out, 64, 1, 2, n, |d| d.fill(n as u8));
        }
        assert_eq!(salt(&mut out, 64, 1 << 40), 4);
        let mut off = 0;
        for n in [1, 40, 300, 7] {
            let r = decode(&out[off..], 1 << 20, 1 << 40).unwrap();
            assert_eq!(r.item, &vec![n as u8; n][..]);
            for other in [0, 1, (1 << 40) - 1, (1 << 40) + 1, 1 << 41] {
                assert_eq!(decode(&out[off..], 1 << 20, other), Err(RecordError::Checksum), "generation {other}");
            }
            off += padded_len(n, 64);
        }
        assert_eq!(off, out.len());
    }
}
