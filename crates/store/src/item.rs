//! The item layout inside a segment.
//!
//! ```text
//!  0        1        2                2+w
//! +--------+--------+----------------+----------+-----------+--------+----------+-----+-------+
//! | keylen | bits   | value length w | [flags4] | [expiry4] | [cas8] | [state1] | key | value |
//! +--------+--------+----------------+----------+-----------+--------+----------+-----+-------+
//!  bits 0-1: width w of the value length: 0 → 1 byte, 1 → 2 bytes, 2 → 4 bytes
//!  bit 2: client flags present (only when non-zero)
//!  bit 3: expiry present (relative seconds; only when the item can expire)
//!  bit 4: explicit CAS present (only on items moved or rewritten in place of
//!         an older version, written over a live version of their key, or
//!         given a CAS by the client; otherwise the CAS is derived from the
//!         location, see `store`)
//!  bit 5: the value is stored compressed (`strata_compress`'s stored form:
//!         a dictionary id byte, then a zstd frame that carries the original
//!         length); the value length field is the stored length
//!  bit 6: state byte present (see [`state`]; only on items that were marked
//!         stale, handed out a recache token, moved after being read,
//!         stored under a base64 key, or written over a live version)
//! ```
//! All integers little-endian, no alignment. A 14-byte key with a 100-byte
//! value, no flags and no expiry costs 3 bytes of header; with a TTL, 7.
//!
//! Concurrency: a published item's lengths and key never change. Its
//! fields (flags, expiry, CAS, state) and value change only in place under
//! the item's bucket lock: the expiry and the state byte (touch, the meta
//! protocol's marks), and everything but the lengths and the key when an
//! overwrite of the same layout is written over it (`overwrite.rs`). Code
//! that reads items without that lock (the segment scanner) reads only the
//! length fields and the key.

const WIDTH_MASK: u8 = 0b11;
const HAS_FLAGS: u8 = 1 << 2;
const HAS_EXPIRY: u8 = 1 << 3;
const HAS_CAS: u8 = 1 << 4;
const COMPRESSED: u8 = 1 << 5;
const HAS_STATE: u8 = 1 << 6;

/// Bits of the optional state byte (the meta protocol's per-item state).
pub mod state {
    /// Marked stale (`md I`, `ms I`): served with `X` until replaced.
    pub const STALE: u8 = 1;
    /// A client was handed the recache token (`W`); others get `Z`.
    pub const TOKEN_SENT: u8 = 1 << 1;
    /// Read before it was last moved by eviction (the index's read counter
    /// starts again at the new place).
    pub const FETCHED: u8 = 1 << 2;
    /// The key was sent in base64 (`ms b`), so replies show it that way.
    pub const KEY_BINARY: u8 = 1 << 3;
    /// Written over a live version of its key: laid out (this byte, and an
    /// explicit CAS) so that the next overwrite of the same size can be
    /// written over it in place (`overwrite.rs`).
    pub const OVERWRITTEN: u8 = 1 << 4;
    /// Its value was written over an older one in place since it was last
    /// placed: eviction keeps it once, as the new version it stands for would
    /// have been kept, and its write time is its segment's latest such write.
    pub const IN_PLACE: u8 = 1 << 5;
}

/// The longest header: lengths, flags, expiry, CAS and state.
pub const MAX_HEADER_LEN: usize = 2 + 4 + 4 + 4 + 8 + 1;

/// An item's optional header fields; zero/`None` fields take no bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fields {
    pub flags: u32,
    /// Server-relative expiry time, 0 for never.
    pub expiry: u32,
    pub cas: Option<u64>,
    /// [`state`] bits.
    pub state: u8,
    /// The value is a compressed stored form, not the client's bytes.
    pub compressed: bool,
}

/// An item's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub klen: u8,
    pub bits: u8,
    pub vlen: u32,
}

fn width_of(bits: u8) -> usize {
    match bits & WIDTH_MASK {
        0 => 1,
        1 => 2,
        _ => 4,
    }
}

impl Header {
    /// The header an item with these fields gets.
    pub fn new(klen: usize, vlen: usize, f: &Fields) -> Header {
        let mut bits = match vlen {
            0..=0xff => 0,
            0x100..=0xffff => 1,
            _ => 2,
        };
        if f.flags != 0 {
            bits |= HAS_FLAGS;
        }
        if f.expiry != 0 {
            bits |= HAS_EXPIRY;
        }
        if f.cas.is_some() {
            bits |= HAS_CAS;
        }
        if f.state != 0 {
            bits |= HAS_STATE;
        }
        if f.compressed {
            bits |= COMPRESSED;
        }
        Header { klen: klen as u8, bits, vlen: vlen as u32 }
    }

    /// Bytes of the length prefix (key length, bits, value length).
    pub fn lengths_len(bits: u8) -> usize {
        2 + width_of(bits)
    }

    /// Parses the length prefix; `b` must hold exactly [`Header::lengths_len`] bytes.
    pub fn parse_lengths(b: &[u8]) -> Header {
        let bits = b[1];
        let vlen = match width_of(bits) {
            1 => u32::from(b[2]),
            2 => u32::from(u16::from_le_bytes([b[2], b[3]])),
            _ => u32::from_le_bytes([b[2], b[3], b[4], b[5]]),
        };
        Header { klen: b[0], bits, vlen }
    }

    /// Offset of the optional fields (the first is the flags, if present).
    pub fn flags_at(&self) -> usize {
        Self::lengths_len(self.bits)
    }

    /// Offset of the expiry field, when present.
    pub fn expiry_at(&self) -> Option<usize> {
        (self.bits & HAS_EXPIRY != 0).then(|| self.flags_at() + if self.bits & HAS_FLAGS != 0 { 4 } else { 0 })
    }

    fn cas_at(&self) -> usize {
        self.flags_at()
            + if self.bits & HAS_FLAGS != 0 { 4 } else { 0 }
            + if self.bits & HAS_EXPIRY != 0 { 4 } else { 0 }
    }

    /// Offset of the state byte, when present.
    pub fn state_at(&self) -> Option<usize> {
        (self.bits & HAS_STATE != 0).then(|| self.cas_at() + if self.bits & HAS_CAS != 0 { 8 } else { 0 })
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        self.cas_at() + if self.bits & HAS_CAS != 0 { 8 } else { 0 } + if self.bits & HAS_STATE != 0 { 1 } else { 0 }
    }

    /// Header, key and value.
    pub fn total_len(&self) -> usize {
        self.header_len() + usize::from(self.klen) + self.vlen as usize
    }
}

/// Bytes an item with these fields occupies.
pub fn encoded_len(klen: usize, vlen: usize, f: &Fields) -> usize {
    Header::new(klen, vlen, f).total_len()
}

/// Writes header and key at the start of `dst` and returns where the value
/// goes. `dst` must be at least [`encoded_len`] bytes.
pub fn write_head(dst: &mut [u8], key: &[u8], vlen: usize, f: &Fields) -> usize {
    let h = Header::new(key.len(), vlen, f);
    dst[0] = h.klen;
    dst[1] = h.bits;
    let mut p = 2;
    match width_of(h.bits) {
        1 => dst[p] = vlen as u8,
        2 => dst[p..p + 2].copy_from_slice(&(vlen as u16).to_le_bytes()),
        _ => dst[p..p + 4].copy_from_slice(&(vlen as u32).to_le_bytes()),
    }
    p += width_of(h.bits);
    p += write_fields(&mut dst[p..], f);
    dst[p..p + key.len()].copy_from_slice(key);
    p + key.len()
}

/// Writes the optional fields `f` lays out (flags, expiry, CAS, state: the
/// header between the lengths and the key) at the start of `dst`; returns
/// their length. An overwrite in place writes only these and the value.
pub fn write_fields(dst: &mut [u8], f: &Fields) -> usize {
    let Fields { flags, expiry, cas, state, .. } = *f;
    let mut p = 0;
    if flags != 0 {
        dst[p..p + 4].copy_from_slice(&flags.to_le_bytes());
        p += 4;
    }
    if expiry != 0 {
        dst[p..p + 4].copy_from_slice(&expiry.to_le_bytes());
        p += 4;
    }
    if let Some(cas) = cas {
        dst[p..p + 8].copy_from_slice(&cas.to_le_bytes());
        p += 8;
    }
    if state != 0 {
        dst[p] = state;
        p += 1;
    }
    p
}

/// A whole item, borrowed from its segment.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    pub header: Header,
    bytes: &'a [u8],
}

impl<'a> Item<'a> {
    /// `bytes` must be exactly the item (`header.total_len()` bytes).
    pub fn new(header: Header, bytes: &'a [u8]) -> Item<'a> {
        Item { header, bytes }
    }

    /// The whole item: header, key and value.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn key(&self) -> &'a [u8] {
        let at = self.header.header_len();
        &self.bytes[at..at + usize::from(self.header.klen)]
    }

    pub fn value(&self) -> &'a [u8] {
        &self.bytes[self.header.header_len() + usize::from(self.header.klen)..]
    }

    pub fn flags(&self) -> u32 {
        if self.header.bits & HAS_FLAGS == 0 {
            return 0;
        }
        let p = self.header.flags_at();
        u32::from_le_bytes([self.bytes[p], self.bytes[p + 1], self.bytes[p + 2], self.bytes[p + 3]])
    }

    pub fn expiry(&self) -> u32 {
        match self.header.expiry_at() {
            Some(p) => u32::from_le_bytes([self.bytes[p], self.bytes[p + 1], self.bytes[p + 2], self.bytes[p + 3]]),
            None => 0,
        }
    }

    /// [`state`] bits (0 without a state byte).
    pub fn state(&self) -> u8 {
        self.header.state_at().map_or(0, |p| self.bytes[p])
    }

    /// Whether the value is a compressed stored form.
    pub fn compressed(&self) -> bool {
        self.header.bits & COMPRESSED != 0
    }

    /// The fields as stored (CAS only if explicit), for a copy or a new
    /// version of the item: without [`state::IN_PLACE`], which is about
    /// the place, not the item.
    pub fn fields(&self) -> Fields {
        Fields {
            flags: self.flags(),
            expiry: self.expiry(),
            cas: self.explicit_cas(),
            state: self.state() & !state::IN_PLACE,
            compressed: self.compressed(),
        }
    }

    /// The CAS stored in the item, if it carries one.
    pub fn explicit_cas(&self) -> Option<u64> {
        if self.header.bits & HAS_CAS == 0 {
            return None;
        }
        let p = self.header.cas_at();
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[p..p + 8]);
        Some(u64::from_le_bytes(b))
    }
}

/// memcached's `safe_strtoull` on a stored value: optional leading spaces,
/// digits, then the end or whitespace.
pub(crate) fn parse_counter(v: &[u8]) -> Option<u64> {
    let start = v.iter().position(|b| !b.is_ascii_whitespace())?;
    let v = &v[start..];
    let v = v.strip_prefix(b"+").unwrap_or(v);
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || v.get(digits).is_some_and(|b| !b.is_ascii_whitespace()) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &v[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn typical_small_item_header_is_at_most_8_bytes() {
        let ttl = Fields { expiry: 1000, ..Fields::default() };
        assert_eq!(Header::new(14, 100, &Fields::default()).header_len(), 3);
        assert_eq!(Header::new(14, 100, &ttl).header_len(), 7);
        assert_eq!(Header::new(14, 1000, &ttl).header_len(), 8);
        let all = Fields { flags: u32::MAX, expiry: 5, cas: Some(1), state: state::STALE, compressed: true };
        assert_eq!(Header::new(250, 1 << 20, &all).header_len(), MAX_HEADER_LEN);
        assert_eq!(MAX_HEADER_LEN, 23);
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config(256, 8))]

        #[test]
        fn round_trip(key in proptest::collection::vec(any::<u8>(), 1..250), vlen in 0usize..70_000,
                      flags in any::<u32>(), expiry in any::<u32>(), cas in any::<Option<u64>>(),
                      state in 0u8..16, compressed in any::<bool>()) {
            let f = Fields { flags, expiry, cas, state, compressed };
            let len = encoded_len(key.len(), vlen, &f);
            let mut buf = vec![0u8; len];
            let voff = write_head(&mut buf, &key, vlen, &f);
            prop_assert_eq!(voff + vlen, len);
            let h = Header::parse_lengths(&buf[..Header::lengths_len(buf[1])]);
            prop_assert_eq!(h.total_len(), len);
            let it = Item::new(h, &buf);
            prop_assert_eq!(it.key(), &key[..]);
            prop_assert_eq!(it.value().len(), vlen);
            prop_assert_eq!(it.flags(), flags);
            prop_assert_eq!(it.expiry(), expiry);
            prop_assert_eq!(it.explicit_cas(), cas);
            prop_assert_eq!(it.state(), state);
            prop_assert_eq!(it.compressed(), compressed);
            prop_assert_eq!(it.fields(), f);
        }
    }
}
