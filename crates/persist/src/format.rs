//! The snapshot file's byte layout: encoding and decoding, no I/O.
//!
//! ```text
//! file    = header record* footer-record
//!
//! header (96 bytes)
//!  0  magic "STRATASN"               8
//!  8  format version (2; 1 loads)   u32
//! 12  header length (96)             u32
//! 16  segment size                   u32   must match (CAS values and
//! 20  item size max (-I)             u32   offsets depend on them)
//! 24  flags: bit 0 CAS on            u32
//! 28  (zero)                         u32
//! 32  process start, unix seconds    i64   the clock's timeline (relative 0)
//! 40  now, relative seconds          u32   at the snapshot's cut
//! 44  flush_all scheduled at         u32   relative, 0 = none; at the cut
//! 48  epochs handed out              u64   at the cut
//! 56  flush epoch                    u64   at the cut (what v2 loads)
//! 64  wall time, unix seconds        i64   at the cut
//! 72  first log file to replay       u64   (--durability; 0 without)
//! 80  (zero)                         12
//! 92  CRC32C of bytes 0..92          u32
//!
//! record header (16 bytes)
//!  0  kind: 1 segment, 2 dictionary, 3 footer,  u8
//!     4 flash state, 5 flash entries
//!  1  (zero)                                    3
//!  4  body length                               u32
//!  8  CRC32C of the body                        u32
//! 12  CRC32C of bytes 0..12                     u32
//!
//! segment body
//!  0  epoch                          u64
//!  8  queue: 0 small, 1 main         u8
//!  9  (zero)                         3
//! 12  latest expiry (u32::MAX never) u32
//! 16  byte count B                   u32
//! 20  live item count L              u32
//! 24  write-time mark count T        u32
//! 28  (zero)                         u32
//! 32  live item offsets              L × u32
//!     write-time marks (off, second) T × (u32, u32)
//!     the segment's bytes            B
//!
//! dictionary body
//!  0  id (1-63)                      u8
//!  1  current: 1 if new values used it   u8
//!  2  (zero)                         6
//!  8  held-out ratio                 f64
//! 16  the trained dictionary         rest
//!
//! flash state body (with `-o ext_path`; see `strata_flash::Checkpoint`)
//!  0  region size                    u64   must match the flash files
//!  8  granule                        u32
//! 12  regions R                      u32
//! 16  head region                    u32
//! 20  wrapped: 1 if the ring came round  u8
//! 21  (zero)                         3
//! 24  per region: bytes written, generation   R × (u64, u64)
//!
//! flash entries body (at most 2^20 entries per record)
//!  0  record addresses, in granules  n × u64
//!
//! footer body (48 bytes)
//!  0  epochs handed out              u64   at the end
//!  8  flush epoch                    u64   at the end
//! 16  flush_all scheduled at         u32   at the end
//! 20  now                            u32   at the end
//! 24  segment records                u64
//! 32  live items in them             u64
//! 40  file bytes before the footer   u64
//! ```
//!
//! All integers little-endian. Every record is checked on its own: a body
//! whose CRC fails loses that record only. A record header whose CRC fails
//! ends the readable part: its length cannot be trusted, and the bytes
//! after it are never searched for something that looks like a header (a
//! value a client stored may hold exactly that), so what follows is lost.

/// The first 8 bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"STRATASN";
/// Bumped whenever the layout above or what it means changes. Version 2:
/// a snapshot is a point in time (its cut, `save.rs`): its header's flush
/// state is the one its items are as of. Version 1 files (each key as of
/// some moment between start and end; the footer's flush state applies)
/// still load.
pub const VERSION: u32 = 2;
/// The oldest version a loader reads.
pub const OLDEST_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 96;
pub const RECORD_LEN: usize = 16;
pub const SEGMENT_FIXED: usize = 32;
pub const DICT_FIXED: usize = 16;
pub const FOOTER_LEN: usize = 48;

/// Why a header or record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not a strata snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot format version {found}, this server reads versions {OLDEST_VERSION} to {VERSION}")]
    Version { found: u32 },
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("record header checksum mismatch")]
    RecordChecksum,
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("record body is malformed")]
    Body,
}

/// The settings and clock a snapshot was taken with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// The format version it was written in ([`VERSION`] when encoded).
    pub version: u32,
    pub segment_size: u32,
    pub item_size_max: u32,
    pub cas: bool,
    pub process_started: i64,
    pub now: u32,
    pub flush_at: u32,
    pub epoch: u64,
    pub flush_epoch: u64,
    pub unix_time: i64,
    /// With `--durability`: the log file begun when the snapshot started,
    /// the first a recovery replays over it.
    pub log_seq: u64,
}

fn put<const N: usize>(out: &mut [u8], at: usize, v: [u8; N]) {
    out[at..at + N].copy_from_slice(&v);
}

fn get<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut v = [0; N];
    v.copy_from_slice(&b[at..at + N]);
    v
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(get(b, at))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(get(b, at))
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        put(&mut b, 0, MAGIC);
        put(&mut b, 8, VERSION.to_le_bytes());
        put(&mut b, 12, (HEADER_LEN as u32).to_le_bytes());
        put(&mut b, 16, self.segment_size.to_le_bytes());
        put(&mut b, 20, self.item_size_max.to_le_bytes());
        put(&mut b, 24, u32::from(self.cas).to_le_bytes());
        put(&mut b, 32, self.process_started.to_le_bytes());
        put(&mut b, 40, self.now.to_le_bytes());
        put(&mut b, 44, self.flush_at.to_le_bytes());
        put(&mut b, 48, self.epoch.to_le_bytes());
        put(&mut b, 56, self.flush_epoch.to_le_bytes());
        put(&mut b, 64, self.unix_time.to_le_bytes());
        put(&mut b, 72, self.log_seq.to_le_bytes());
        let crc = crc32c::crc32c(&b[..92]);
        put(&mut b, 92, crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, FormatError> {
        if b[..8] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        // The version is checked before the checksum: a later format may
        // lay out the rest differently, and saying so is more useful.
        let version = u32_at(b, 8);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(FormatError::Version { found: version });
        }
        if u32_at(b, 92) != crc32c::crc32c(&b[..92]) || u32_at(b, 12) as usize != HEADER_LEN {
            return Err(FormatError::HeaderChecksum);
        }
        Ok(Header {
            version,
            segment_size: u32_at(b, 16),
            item_size_max: u32_at(b, 20),
            cas: u32_at(b, 24) & 1 != 0,
            process_started: i64::from_le_bytes(get(b, 32)),
            now: u32_at(b, 40),
            flush_at: u32_at(b, 44),
            epoch: u64_at(b, 48),
            flush_epoch: u64_at(b, 56),
            unix_time: i64::from_le_bytes(get(b, 64)),
            log_seq: u64_at(b, 72),
        })
    }
}

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Segment = 1,
    Dict = 2,
    Footer = 3,
    FlashState = 4,
    FlashEntries = 5,
}

/// A record's header: its kind, body length and body checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub len: u32,
    pub crc: u32,
}

impl Record {
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0] = self.kind as u8;
        put(&mut b, 4, self.len.to_le_bytes());
        put(&mut b, 8, self.crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..12]);
        put(&mut b, 12, crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; RECORD_LEN]) -> Result<Record, FormatError> {
        if u32_at(b, 12) != crc32c::crc32c(&b[..12]) {
            return Err(FormatError::RecordChecksum);
        }
        let kind = match b[0] {
            1 => Kind::Segment,
            2 => Kind::Dict,
            3 => Kind::Footer,
            4 => Kind::FlashState,
            5 => Kind::FlashEntries,
            k => return Err(FormatError::Kind(k)),
        };
        Ok(Record { kind, len: u32_at(b, 4), crc: u32_at(b, 8) })
    }
}

/// Flash entries per record: 8 MiB bodies.
pub const FLASH_ENTRIES_PER_RECORD: usize = 1 << 20;
pub const FLASH_STATE_FIXED: usize = 24;

pub fn encode_flash_state(cp: &strata_flash::Checkpoint) -> Vec<u8> {
    let mut b = vec![0u8; FLASH_STATE_FIXED];
    put(&mut b, 0, cp.region_size.to_le_bytes());
    put(&mut b, 8, cp.granule.to_le_bytes());
    put(&mut b, 12, (cp.regions.len() as u32).to_le_bytes());
    put(&mut b, 16, cp.head.to_le_bytes());
    b[20] = u8::from(cp.wrapped);
    for &(end, gen) in &cp.regions {
        b.extend_from_slice(&end.to_le_bytes());
        b.extend_from_slice(&gen.to_le_bytes());
    }
    b
}

pub fn decode_flash_state(b: &[u8]) -> Result<strata_flash::Checkpoint, FormatError> {
    if b.len() < FLASH_STATE_FIXED {
        return Err(FormatError::Body);
    }
    let n = u32_at(b, 12) as usize;
    if b.len() != FLASH_STATE_FIXED + n * 16 {
        return Err(FormatError::Body);
    }
    let regions = b[FLASH_STATE_FIXED..]
        .chunks_exact(16)
        .map(|c| (u64::from_le_bytes(get(c, 0)), u64::from_le_bytes(get(c, 8))))
        .collect();
    Ok(strata_flash::Checkpoint {
        region_size: u64::from_le_bytes(get(b, 0)),
        granule: u32_at(b, 8),
        head: u32_at(b, 16),
        wrapped: b[20] != 0,
        regions,
    })
}

/// The fixed part of a segment record's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFixed {
    pub epoch: u64,
    pub main: bool,
    pub max_expire: u32,
    pub bytes: u32,
    pub live: u32,
    pub times: u32,
}

impl SegmentFixed {
    pub fn encode(&self) -> [u8; SEGMENT_FIXED] {
        let mut b = [0u8; SEGMENT_FIXED];
        put(&mut b, 0, self.epoch.to_le_bytes());
        b[8] = u8::from(self.main);
        put(&mut b, 12, self.max_expire.to_le_bytes());
        put(&mut b, 16, self.bytes.to_le_bytes());
        put(&mut b, 20, self.live.to_le_bytes());
        put(&mut b, 24, self.times.to_le_bytes());
        b
    }

    /// The whole body length this fixed part announces.
    pub fn body_len(&self) -> u64 {
        SEGMENT_FIXED as u64 + 4 * u64::from(self.live) + 8 * u64::from(self.times) + u64::from(self.bytes)
    }

    /// Decodes a segment body's fixed part; `body_len` must be what it announces.
    pub fn decode(b: &[u8], body_len: usize) -> Result<SegmentFixed, FormatError> {
        if b.len() < SEGMENT_FIXED {
            return Err(FormatError::Body);
        }
        let f = SegmentFixed {
            epoch: u64_at(b, 0),
            main: b[8] == 1,
            max_expire: u32_at(b, 12),
            bytes: u32_at(b, 16),
            live: u32_at(b, 20),
            times: u32_at(b, 24),
        };
        if b[8] > 1 || f.body_len() != body_len as u64 {
            return Err(FormatError::Body);
        }
        Ok(f)
    }
}

/// The store-wide facts at the end of a snapshot, and its totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footer {
    pub epoch: u64,
    pub flush_epoch: u64,
    pub flush_at: u32,
    pub now: u32,
    pub segments: u64,
    pub items: u64,
    pub bytes_before: u64,
}

impl Footer {
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        put(&mut b, 0, self.epoch.to_le_bytes());
        put(&mut b, 8, self.flush_epoch.to_le_bytes());
        put(&mut b, 16, self.flush_at.to_le_bytes());
        put(&mut b, 20, self.now.to_le_bytes());
        put(&mut b, 24, self.segments.to_le_bytes());
        put(&mut b, 32, self.items.to_le_bytes());
        put(&mut b, 40, self.bytes_before.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Footer, FormatError> {
        if b.len() != FOOTER_LEN {
            return Err(FormatError::Body);
        }
        Ok(Footer {
            epoch: u64_at(b, 0),
            flush_epoch: u64_at(b, 8),
            flush_at: u32_at(b, 16),
            now: u32_at(b, 20),
            segments: u64_at(b, 24),
            items: u64_at(b, 32),
            bytes_before: u64_at(b, 40),
        })
    }
}

/// A dictionary record's body.
pub fn encode_dict(d: &strata_compress::SavedDict) -> Vec<u8> {
    let mut b = vec![0u8; DICT_FIXED];
    b[0] = d.id;
    b[1] = u8::from(d.current);
    put(&mut b, 8, d.ratio.to_le_bytes());
    b.extend_from_slice(&d.bytes);
    b
}

pub fn decode_dict(b: &[u8]) -> Result<strata_compress::SavedDict, FormatError> {
    if b.len() <= DICT_FIXED || b[1] > 1 {
        return Err(FormatError::Body);
    }
    let ratio = f64::from_le_bytes(get(b, 8));
    if !ratio.is_finite() {
        return Err(FormatError::Body);
    }
    Ok(strata_compress::SavedDict { id: b[0], current: b[1] == 1, ratio, bytes: b[DICT_FIXED..].to_vec() })
}

/// Reads a segment body's offsets and marks (the bytes are the last
/// `fixed.bytes` of the body).
pub fn decode_segment_lists(body: &[u8], f: &SegmentFixed, live: &mut Vec<u32>, times: &mut Vec<(u32, u32)>) {
    live.clear();
    times.clear();
    let mut at = SEGMENT_FIXED;
    for _ in 0..f.live {
        live.push(u32_at(body, at));
        at += 4;
    }
    for _ in 0..f.times {
        times.push((u32_at(body, at), u32_at(body, at + 4)));
        at += 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            version: VERSION,
            segment_size: 1 << 20,
            item_size_max: 1 << 20,
            cas: true,
            process_started: 1_700_000_000,
            now: 1234,
            flush_at: 0,
            epoch: 77,
            flush_epoch: 5,
            unix_time: 1_700_001_234,
            log_seq: 3,
        }
    }

    #[test]
    fn layouts_have_their_drawn_sizes() {
        assert_eq!(header().encode().len(), 96);
        assert_eq!(Record { kind: Kind::Segment, len: 0, crc: 0 }.encode().len(), 16);
        assert_eq!(Footer::default().encode().len(), 48);
        let f = SegmentFixed { epoch: 1, main: false, max_expire: 0, bytes: 100, live: 3, times: 2 };
        assert_eq!(f.encode().len(), 32);
        assert_eq!(f.body_len(), 32 + 12 + 16 + 100);
    }

    #[test]
    fn the_header_is_pinned_byte_for_byte() {
        let b = header().encode();
        assert_eq!(&b[..8], b"STRATASN");
        assert_eq!(&b[8..16], &[2, 0, 0, 0, 96, 0, 0, 0]);
        assert_eq!(&b[16..24], &[0, 0, 0x10, 0, 0, 0, 0x10, 0]);
        assert_eq!(b[24], 1);
        assert_eq!(&b[48..56], &77u64.to_le_bytes());
        assert_eq!(Header::decode(&b), Ok(header()));
    }

    #[test]
    fn damage_is_detected() {
        let good = header().encode();
        for i in 0..HEADER_LEN {
            let mut b = good;
            b[i] ^= 0x40;
            assert!(Header::decode(&b).is_err(), "flipped byte {i} went unnoticed");
        }
        let mut v3 = good;
        v3[8] = 3;
        assert_eq!(Header::decode(&v3), Err(FormatError::Version { found: 3 }));
        // A version 1 file (an earlier build's) still reads, as version 1.
        let mut v1 = good;
        v1[8] = 1;
        let crc = crc32c::crc32c(&v1[..92]);
        v1[92..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Header::decode(&v1), Ok(Header { version: 1, ..header() }));
        let r = Record { kind: Kind::Dict, len: 99, crc: 7 }.encode();
        assert_eq!(Record::decode(&r), Ok(Record { kind: Kind::Dict, len: 99, crc: 7 }));
        for i in 0..RECORD_LEN {
            let mut b = r;
            b[i] ^= 1;
            assert!(Record::decode(&b).is_err(), "flipped record byte {i} went unnoticed");
        }
    }

    #[test]
    fn bodies_round_trip_and_refuse_nonsense() {
        let f = SegmentFixed { epoch: 9, main: true, max_expire: u32::MAX, bytes: 8, live: 1, times: 1 };
        let mut body = f.encode().to_vec();
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&5u32.to_le_bytes());
        body.extend_from_slice(&[1; 8]);
        assert_eq!(SegmentFixed::decode(&body, body.len()), Ok(f));
        assert_eq!(SegmentFixed::decode(&body, body.len() - 1), Err(FormatError::Body));
        let (mut live, mut times) = (Vec::new(), Vec::new());
        decode_segment_lists(&body, &f, &mut live, &mut times);
        assert_eq!((live, times), (vec![0], vec![(0, 5)]));
        let d = strata_compress::SavedDict { id: 3, current: true, ratio: 2.5, bytes: vec![1, 2, 3] };
        assert_eq!(decode_dict(&encode_dict(&d)), Ok(d));
        assert_eq!(decode_dict(&[0; 16]), Err(FormatError::Body));
        let foot = Footer { epoch: 1, flush_epoch: 2, flush_at: 3, now: 4, segments: 5, items: 6, bytes_before: 7 };
        assert_eq!(Footer::decode(&foot.encode()), Ok(foot));
    }
}
