//! The log: the flash files cut into regions, written in ring order, one
//! region at a time, in large sequential writes; the oldest region is
//! reclaimed when the ring comes round to it.
//!
//! ```text
//!   path 1: [ region 0 | region 1 | region 2 ]   path 2: [ region 3 | region 4 ]
//!              ▲ oldest (reclaimed next)  ▲ head: records appended here
//! ```
//! An address is `region × region_size + offset`, in granules of
//! [`Flash::granule`] bytes, so that it fits the index slot's 33 bits.
//!
//! What the log knows per region, in RAM: where it is, how far it is
//! written, how many of its records the index still links (kept by the
//! store), and its generation: a number from one counter for the whole
//! log, new each time the head enters the region — a reader that saw an
//! address before the region was reclaimed notices. That is about 40
//! bytes per region, a few bytes per gigabyte.
//!
//! **On disk** each region starts with a header naming its generation,
//! written with the first records of that generation (in that order, not
//! synced: the salt below keeps generations apart on disk):
//! ```text
//!  0  magic "STRFLREG"   8
//!  8  generation         u64
//! 16  region index       u32
//! 20  format             u32 (1: records salted, below; 0 before)
//! 24  CRC32C of 0..24    u32
//! 28  (zero to the first record: max(64, granule) bytes in all)
//! ```
//! A snapshot records each region's generation and how far it was written
//! ([`Checkpoint`]); a restart keeps only the regions whose header still
//! names that generation (the others were reclaimed since, and their old
//! records may be overwritten). Generations start above every one found
//! on disk, so one is never reused.
//!
//! **Each record's checksum is salted with its region's generation**
//! ([`record::salt`]): a record is valid only in the generation it was
//! written in. A restart keeps a region whose header names the generation
//! a snapshot saved, and there reads a record only if its checksum holds
//! for that generation. That is what makes the flash image hold **after a
//! power loss**, with one sync: a snapshot makes the records it
//! references (and their regions' headers) durable ([`Flash::sync`])
//! before it is renamed into place. Whatever the disk kept of what was
//! written after it (a reclaimed region's new header or not, any of its
//! new records), a record of a later generation fails its check like a
//! damaged one: a miss, never another item's bytes. A generation is never
//! handed out twice with records that a restart could read: one a
//! snapshot saved was durable on disk, and every process starts above the
//! generations on disk. The header itself is an ordinary write: before
//! the salt it was written durably (`RWF_DSYNC`) ahead of the region's
//! first records, which under a heavy write load waited for the file
//! system to commit everything written since, with a worker's requests
//! held (hundreds of milliseconds in bench/soak.py).
//!
//! The log knows nothing of keys or the index: the store (which owns the
//! index) decides what goes to flash, points slots at it, and unlinks a
//! region's records before it is reused ([`Writer::reserve`] says when).

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

use parking_lot::{Mutex, MutexGuard};
use strata_io::{read_exact_at, read_exact_at_nowait, write_all_at, Device};

use crate::record::{self, Record, RecordError, HEADER_LEN};

/// Bits of a flash address in the index slot.
pub const ADDR_BITS: u32 = 33;

const REGION_MAGIC: [u8; 8] = *b"STRFLREG";
/// The region header's format: 1 since records are salted with the
/// region's generation. A region written before (0) holds records no
/// salted check accepts: a restart leaves it out, as a reclaimed one.
const REGION_FORMAT: u32 = 1;
/// Bytes of a region header before padding to the granule.
const REGION_HEADER_MIN: u64 = 64;

/// The log's state for a snapshot: enough, with the addresses the index
/// links, to bring the flash items back after a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub region_size: u64,
    pub granule: u32,
    /// The region being written, and whether the ring had come round.
    pub head: u32,
    pub wrapped: bool,
    /// Per region: bytes written and generation.
    pub regions: Vec<(u64, u64)>,
}

/// The flash tier's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes per region (memcached's `ext_page_size`).
    pub region_size: u64,
    /// The largest record (a value of `-I` with its headers).
    pub max_record: usize,
}

/// Why the flash tier cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("flash tier needs at least two regions of {0} bytes")]
    TooSmall(u64),
    #[error("flash region size must be at least 1 MiB and hold the largest item")]
    RegionSize,
}

/// Why a read returned no record: a miss, never wrong bytes.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("flash read failed: {0}")]
    Io(#[from] io::Error),
    #[error("flash record damaged: {0}")]
    Record(#[from] RecordError),
    #[error("flash address out of range")]
    Range,
    /// [`Flash::read_cached`]: the record is not all in memory; nothing
    /// was counted.
    #[error("flash record not in memory")]
    WouldBlock,
}

/// Counters, for `stats`.
#[derive(Debug, Default)]
pub struct Stats {
    pub objects_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub write_errors: AtomicU64,
    pub reads: AtomicU64,
    pub bytes_read: AtomicU64,
    pub read_errors: AtomicU64,
    pub checksum_errors: AtomicU64,
    /// Regions emptied for reuse when the ring came round (memcached's
    /// `extstore_page_reclaims`), and of those, the ones the index still
    /// linked records in (`extstore_page_evictions`).
    pub regions_reclaimed: AtomicU64,
    pub regions_evicted: AtomicU64,
    /// Regions the head moved into to write (memcached's
    /// `extstore_page_allocs`; the first, open from the start, is not
    /// counted, as memcached's count starts at 0 with one page in use).
    pub regions_opened: AtomicU64,
}

#[derive(Debug)]
struct Region {
    dev: usize,
    base: u64,
    /// Bytes written from the region's start.
    end: AtomicU64,
    /// Records the index links here (kept by the store).
    live: AtomicU64,
    /// Its generation (see the module doc); 0 before first use.
    gen: AtomicU64,
}

#[derive(Debug)]
struct Head {
    region: u32,
    /// Offset of the next record in the head region.
    off: u64,
    /// Whether the ring has come round: every region ahead holds records.
    wrapped: bool,
    /// The head region's header is still to be written.
    header_due: bool,
    /// The next generation to hand out.
    next_gen: u64,
}

/// The flash log. Shared; writers take [`Flash::writer`] one at a time.
#[derive(Debug)]
pub struct Flash {
    devices: Vec<Device>,
    regions: Box<[Region]>,
    region_size: u64,
    granule_shift: u32,
    max_record: usize,
    head: Mutex<Head>,
    /// The head's region, readable without its lock (for `stats`, which
    /// must not wait for a write in progress).
    head_region: AtomicU32,
    /// When [`Flash::start_writeback`] last started the files' writeback.
    writeback_at: Mutex<std::time::Instant>,
    pub stats: Stats,
}

impl Flash {
    /// Cuts `devices` into regions, starting empty.
    pub fn new(cfg: &Config, devices: Vec<Device>) -> Result<Flash, FlashError> {
        let rs = cfg.region_size;
        if rs < 1 << 20 || rs < (cfg.max_record + HEADER_LEN) as u64 * 2 {
            return Err(FlashError::RegionSize);
        }
        let mut regions = Vec::new();
        for (dev, d) in devices.iter().enumerate() {
            for i in 0..d.len / rs {
                let r = Region {
                    dev,
                    base: i * rs,
                    end: AtomicU64::new(0),
                    live: AtomicU64::new(0),
                    gen: AtomicU64::new(0),
                };
                regions.push(r);
            }
        }
        if regions.len() < 2 {
            return Err(FlashError::TooSmall(rs));
        }
        let total = regions.len() as u64 * rs;
        let mut granule_shift = 3;
        while total >> granule_shift >= 1 << ADDR_BITS {
            granule_shift += 1;
        }
        let mut flash = Flash {
            devices,
            regions: regions.into_boxed_slice(),
            region_size: rs,
            granule_shift,
            max_record: cfg.max_record + HEADER_LEN,
            head: Mutex::new(Head { region: 0, off: 0, wrapped: false, header_due: true, next_gen: 1 }),
            head_region: AtomicU32::new(0),
            writeback_at: Mutex::new(std::time::Instant::now()),
            stats: Stats::default(),
        };
        // Every header on disk (an unreadable one counts as none):
        // generations go on above the highest, of any format.
        let mut top = 0;
        for (i, r) in flash.regions.iter().enumerate() {
            r.gen.store(flash.disk_generation(i as u32).unwrap_or(0), Relaxed);
            top = top.max(flash.disk_header(i as u32).map_or(0, |(g, _)| g));
        }
        let header_len = flash.header_len();
        let head = flash.head.get_mut();
        head.next_gen = top + 1;
        head.off = header_len;
        flash.regions[0].gen.store(head.next_gen, Relaxed);
        head.next_gen += 1;
        Ok(flash)
    }

    /// The longest write a region takes (its size less its header).
    pub fn max_write(&self) -> usize {
        (self.region_size - self.header_len()) as usize
    }

    /// Bytes of a region header, padded to the granule.
    fn header_len(&self) -> u64 {
        REGION_HEADER_MIN.max(1 << self.granule_shift)
    }

    fn header_bytes(&self, r: u32, gen: u64) -> Vec<u8> {
        let mut h = vec![0u8; self.header_len() as usize];
        h[..8].copy_from_slice(&REGION_MAGIC);
        h[8..16].copy_from_slice(&gen.to_le_bytes());
        h[16..20].copy_from_slice(&r.to_le_bytes());
        h[20..24].copy_from_slice(&REGION_FORMAT.to_le_bytes());
        let crc = crc32c::crc32c(&h[..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// The generation region `r`'s header on disk names, if it has one of
    /// this format.
    pub fn disk_generation(&self, r: u32) -> Option<u64> {
        self.disk_header(r).and_then(|(gen, format)| (format == REGION_FORMAT).then_some(gen))
    }

    /// Region `r`'s header on disk, if readable: its generation and format.
    fn disk_header(&self, r: u32) -> Option<(u64, u32)> {
        let region = self.regions.get(r as usize)?;
        let mut h = [0u8; 28];
        if !read_exact_at(&*self.devices[region.dev].file, &mut h, region.base).ok()? {
            return None;
        }
        let ok = h[..8] == REGION_MAGIC
            && h[16..20] == r.to_le_bytes()
            && crc32c::crc32c(&h[..24]).to_le_bytes() == h[24..28];
        let gen = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        ok.then_some((gen, u32::from_le_bytes([h[20], h[21], h[22], h[23]])))
    }

    /// The log's state, for a snapshot (see [`Checkpoint`]).
    pub fn checkpoint(&self) -> Checkpoint {
        self.writer().checkpoint()
    }

    /// Takes up a checkpoint's state at start, before anything is written:
    /// the regions whose header still names the checkpoint's generation
    /// keep their records (the others were reclaimed since); writing goes
    /// on in the region after the checkpoint's head. Returns which regions
    /// were kept, or `None` if the checkpoint is for another layout.
    pub fn restore(&self, cp: &Checkpoint) -> Option<Vec<bool>> {
        if cp.region_size != self.region_size
            || cp.granule != 1 << self.granule_shift
            || cp.regions.len() != self.regions.len()
            || cp.head as usize >= self.regions.len()
        {
            return None;
        }
        let mut head = self.head.lock();
        let mut kept = Vec::with_capacity(cp.regions.len());
        for (i, (r, &(end, gen))) in self.regions.iter().zip(&cp.regions).enumerate() {
            let on_disk = self.disk_generation(i as u32);
            let keep = gen != 0 && end <= self.region_size && on_disk == Some(gen);
            // Each region's generation in RAM is its header's again: the
            // next checkpoint saves it, and the restore after that keeps
            // only regions whose header names the saved one. `new` gave
            // region 0 a fresh generation for a head starting there; the
            // head now goes on after the checkpoint's instead, so that
            // generation is never written, and a snapshot taken before any
            // write would otherwise lose region 0 on the next restart.
            r.gen.store(on_disk.unwrap_or(0), Release);
            r.end.store(if keep { end } else { 0 }, Release);
            r.live.store(0, Relaxed);
            kept.push(keep);
        }
        // The head region may hold records written after the checkpoint:
        // it is left as it was, and the next write starts the next region.
        head.region = cp.head;
        self.head_region.store(cp.head, Relaxed);
        head.off = self.region_size;
        head.wrapped = cp.wrapped;
        head.header_due = false;
        Some(kept)
    }

    /// Reads the records of region `r` written before `end`, in address
    /// order, for a restore: as [`Writer::scan`].
    pub fn scan_region(&self, r: u32, buf: &mut Vec<u8>, f: impl FnMut(u64, Record<'_>)) -> io::Result<()> {
        self.scan_records(r, buf, f)
    }

    /// Records start at multiples of this many bytes.
    pub fn granule(&self) -> usize {
        1 << self.granule_shift
    }

    /// An address as the index stores it (granules), and back.
    pub fn to_slot(&self, addr: u64) -> u64 {
        addr >> self.granule_shift
    }
    pub fn from_slot(&self, v: u64) -> u64 {
        v << self.granule_shift
    }

    pub fn region_size(&self) -> u64 {
        self.region_size
    }

    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// Bytes of flash in use (written, not yet reclaimed).
    pub fn bytes_used(&self) -> u64 {
        self.regions.iter().map(|r| r.end.load(Relaxed)).sum()
    }

    /// Regions in use: holding records, or the head's (memcached's
    /// `extstore_pages_used`); the others are free.
    pub fn regions_used(&self) -> u64 {
        let head = self.head_region.load(Relaxed) as usize;
        self.regions.iter().enumerate().filter(|&(i, r)| i == head || r.end.load(Relaxed) != 0).count() as u64
    }

    /// Each region's generation (0: never used) and bytes written, in
    /// order: memcached's extstore pages, for `stats extstore`.
    pub fn pages(&self) -> Vec<(u64, u64)> {
        self.regions.iter().map(|r| (r.gen.load(Relaxed), r.end.load(Relaxed))).collect()
    }

    /// Total bytes of the regions.
    pub fn capacity(&self) -> u64 {
        self.regions.len() as u64 * self.region_size
    }

    /// The region an address is in.
    pub fn region_of(&self, addr: u64) -> u32 {
        (addr / self.region_size) as u32
    }

    /// Records linked by the index, all regions.
    pub fn live(&self) -> u64 {
        self.regions.iter().map(|r| r.live.load(Relaxed)).sum()
    }

    /// Bytes of RAM the log's per-region bookkeeping takes.
    pub fn metadata_bytes(&self) -> usize {
        std::mem::size_of::<Flash>() + self.regions.len() * std::mem::size_of::<Region>()
    }

    /// The store links one more record of `region`, or one fewer.
    pub fn link(&self, region: u32) {
        if let Some(r) = self.regions.get(region as usize) {
            r.live.fetch_add(1, Relaxed);
        }
    }
    pub fn unlink(&self, region: u32) {
        if let Some(r) = self.regions.get(region as usize) {
            // Saturating: a record left linked across a reclaim (its
            // region's scan could not read it) is counted at most once.
            let _ = r.live.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
    }

    /// The region's generation now: compare after a read to learn whether
    /// it was reclaimed meanwhile.
    pub fn generation(&self, region: u32) -> u64 {
        self.regions.get(region as usize).map_or(u64::MAX, |r| r.gen.load(Acquire))
    }

    /// Reads and verifies the record at `addr` into `buf`, as written in
    /// generation `gen` of its region: the one the caller saw when it took
    /// the address (a slot's, under its lock). A record checked against the
    /// generation loaded here instead was counted damaged when the region
    /// had been reclaimed and written again between the caller's look and
    /// the read (`badcrc_from_extstore` on a sound device).
    pub fn read<'a>(&self, addr: u64, gen: u64, buf: &'a mut Vec<u8>) -> Result<Record<'a>, ReadError> {
        self.read_with(addr, gen, buf, false)
    }

    /// [`Flash::read`] if the record is in memory (the page cache) and
    /// needs no wait for the device; [`ReadError::WouldBlock`] otherwise.
    pub fn read_cached<'a>(&self, addr: u64, gen: u64, buf: &'a mut Vec<u8>) -> Result<Record<'a>, ReadError> {
        self.read_with(addr, gen, buf, true)
    }

    /// Counts a record the caller read and found damaged: it failed its
    /// check in the generation the caller saw, and the region was not
    /// being written over meanwhile (`badcrc_from_extstore`).
    pub fn note_damaged(&self) {
        self.stats.checksum_errors.fetch_add(1, Relaxed);
    }

    fn read_with<'a>(&self, addr: u64, gen: u64, buf: &'a mut Vec<u8>, nowait: bool) -> Result<Record<'a>, ReadError> {
        let r = self.regions.get(self.region_of(addr) as usize).ok_or(ReadError::Range)?;
        let off = addr % self.region_size;
        let room = (self.region_size - off) as usize;
        let max = self.max_record.min(room);
        // Most records fit in one 4 KiB read; a longer one takes a second.
        let first = max.min(4096 - (addr % 4096) as usize).max(HEADER_LEN.min(max));
        let st = &self.stats;
        // A reclaim since the caller's look makes the record fail its
        // check (a later generation's bytes) and changes the generation the
        // caller compares after the read.
        let res = (|| {
            buf.resize(first, 0);
            self.read_dev(r, buf, off, nowait)?;
            let need = match record::decode(buf, max, gen) {
                Err(RecordError::Short(need)) => need,
                other => return other.map(|_| ()).map_err(ReadError::from),
            };
            buf.resize(need, 0);
            self.read_dev(r, &mut buf[first..], off + first as u64, nowait)?;
            Ok(())
        })();
        if matches!(&res, Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock) {
            return Err(ReadError::WouldBlock);
        }
        st.reads.fetch_add(1, Relaxed);
        match res {
            Ok(()) => {
                st.bytes_read.fetch_add(buf.len() as u64, Relaxed);
                record::decode(buf, max, gen).map_err(ReadError::from)
            }
            Err(e) => {
                // A record that fails its check is not counted here: the
                // caller knows whether it is damaged or was written over
                // since it looked ([`Flash::note_damaged`]).
                if matches!(e, ReadError::Io(_)) {
                    st.read_errors.fetch_add(1, Relaxed);
                }
                Err(e)
            }
        }
    }

    fn read_dev(&self, r: &Region, buf: &mut [u8], off: u64, nowait: bool) -> io::Result<()> {
        let d = &*self.devices[r.dev].file;
        whole(if nowait { read_exact_at_nowait(d, buf, r.base + off) } else { read_exact_at(d, buf, r.base + off) })
    }

    /// Makes every record written so far durable (`fdatasync` of each
    /// file): a snapshot that references them calls it before it is
    /// renamed into place.
    pub fn sync(&self) -> io::Result<()> {
        self.devices.iter().try_for_each(|d| d.file.sync())
    }

    /// Starts writing the records written so far to the disk, without
    /// waiting (see [`strata_io::PosFile::start_writeback`]). The store's
    /// reclaimer calls it every tick: a region header's durable write
    /// (one a region) otherwise waited for the file system to commit
    /// everything written since the last, hundreds of megabytes under a
    /// heavy write load, while the worker writing it held its requests.
    /// At most every 100 ms (a system call a file each time); every 10 ms
    /// made no difference to a probe's waits in bench/soak.py.
    pub fn start_writeback(&self) {
        {
            let Some(mut at) = self.writeback_at.try_lock() else { return };
            if at.elapsed() < std::time::Duration::from_millis(100) {
                return;
            }
            *at = std::time::Instant::now();
        }
        self.devices.iter().for_each(|d| d.file.start_writeback());
    }

    fn scan_records(&self, r: u32, buf: &mut Vec<u8>, mut f: impl FnMut(u64, Record<'_>)) -> io::Result<()> {
        let region = &self.regions[r as usize];
        let end = region.end.load(Acquire) as usize;
        let start = self.header_len() as usize;
        if end <= start {
            return Ok(());
        }
        buf.resize(end, 0);
        whole(read_exact_at(&*self.devices[region.dev].file, &mut buf[start..], region.base + start as u64))?;
        let base = u64::from(r) * self.region_size;
        let gen = region.gen.load(Acquire);
        let mut off = start;
        while off + HEADER_LEN <= end {
            let Some(len) = record::claimed_len(&buf[off..end]).filter(|&l| l <= self.max_record && off + l <= end)
            else {
                break;
            };
            match record::decode(&buf[off..end], self.max_record, gen) {
                Ok(rec) => f(base + off as u64, rec),
                Err(_) => {
                    self.stats.checksum_errors.fetch_add(1, Relaxed);
                }
            }
            off += len.next_multiple_of(self.granule());
        }
        Ok(())
    }

    /// The one writer: holds the head while it reserves, writes and
    /// points the index at what it wrote, and while it reclaims.
    pub fn writer(&self) -> Writer<'_> {
        Writer { flash: self, head: self.head.lock() }
    }
}

/// A whole read, or `UnexpectedEof` if the file ended first.
fn whole(read: io::Result<bool>) -> io::Result<()> {
    if read? {
        Ok(())
    } else {
        Err(io::ErrorKind::UnexpectedEof.into())
    }
}

/// What [`Writer::reserve`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// Write the bytes here.
    At(u64),
    /// The next region still holds records: the store unlinks them
    /// ([`Writer::scan`]), calls [`Writer::recycle`], and reserves again.
    Reclaim(u32),
}

/// The flash log's writer (see [`Flash::writer`]).
pub struct Writer<'a> {
    flash: &'a Flash,
    head: MutexGuard<'a, Head>,
}

impl Writer<'_> {
    /// Room for `len` bytes in the head region, moving to the next region
    /// if they do not fit; `None` if they would not fit in any region
    /// (see [`Flash::max_write`]).
    pub fn reserve(&mut self, len: usize) -> Option<Reserve> {
        let f = self.flash;
        let len = len as u64;
        if len > f.region_size - f.header_len() {
            return None;
        }
        if self.head.off + len > f.region_size {
            let next = (self.head.region + 1) % f.regions.len() as u32;
            if next == 0 {
                self.head.wrapped = true;
            }
            if self.head.wrapped && f.regions[next as usize].end.load(Relaxed) != 0 {
                return Some(Reserve::Reclaim(next));
            }
            self.head.region = next;
            f.head_region.store(next, Relaxed);
            f.stats.regions_opened.fetch_add(1, Relaxed);
            self.head.off = f.header_len();
            self.head.header_due = true;
            let gen = self.head.next_gen;
            self.head.next_gen += 1;
            f.regions[next as usize].gen.store(gen, Release);
        }
        let at = u64::from(self.head.region) * f.region_size + self.head.off;
        self.head.off += len;
        Some(Reserve::At(at))
    }

    /// Writes `bytes` at `at` (from [`Writer::reserve`]): records as
    /// [`record::encode`] made them, salted here with the region's
    /// generation, in place (a buffer is written once: written again it
    /// would be salted twice). On failure the bytes count as never written: the
    /// caller links nothing to them, and the head goes back to `at`, so
    /// that a failing device does not carry the ring round over the
    /// regions it did write.
    pub fn write(&mut self, at: u64, bytes: &mut [u8], records: u64) -> io::Result<()> {
        let f = self.flash;
        let r = f.region_of(at);
        let region = &f.regions[r as usize];
        let off = at % f.region_size;
        let dev = &*f.devices[region.dev].file;
        let gen = region.gen.load(Relaxed);
        record::salt(bytes, f.granule(), gen);
        // The header with the region's first records, no sync of its own:
        // the salt, not the order on disk, keeps generations apart.
        let header = if self.head.header_due && r == self.head.region {
            write_all_at(dev, &f.header_bytes(r, gen), region.base)
        } else {
            Ok(())
        };
        match header.and_then(|()| write_all_at(dev, bytes, region.base + off)) {
            Ok(()) => {
                if r == self.head.region {
                    self.head.header_due = false;
                }
                region.end.fetch_max(off + bytes.len() as u64, Release);
                f.stats.objects_written.fetch_add(records, Relaxed);
                f.stats.bytes_written.fetch_add(bytes.len() as u64, Relaxed);
                Ok(())
            }
            Err(e) => {
                f.stats.write_errors.fetch_add(1, Relaxed);
                if u64::from(self.head.region) == at / f.region_size && self.head.off == off + bytes.len() as u64 {
                    self.head.off = off;
                }
                Err(e)
            }
        }
    }

    /// Reads region `r`'s records for its reclaim, calling `f` with each
    /// record's address and bytes. A record that fails its checksum is
    /// skipped; a damaged length ends the walk (its region's generation
    /// still changes, so a slot left pointing past it reads as a miss).
    pub fn scan(&mut self, r: u32, buf: &mut Vec<u8>, f: impl FnMut(u64, Record<'_>)) -> io::Result<()> {
        // Records the index still links are lost with the region (or
        // written again): the reclaim is an eviction.
        if self.flash.regions.get(r as usize).is_some_and(|x| x.live.load(Relaxed) > 0) {
            self.flash.stats.regions_evicted.fetch_add(1, Relaxed);
        }
        self.flash.scan_records(r, buf, f)
    }

    /// The log's state while this writer holds it (see [`Flash::checkpoint`]):
    /// nothing is written, moved or reclaimed until the writer is dropped.
    pub fn checkpoint(&self) -> Checkpoint {
        let f = self.flash;
        Checkpoint {
            region_size: f.region_size,
            granule: 1 << f.granule_shift,
            head: self.head.region,
            wrapped: self.head.wrapped,
            regions: f.regions.iter().map(|r| (r.end.load(Acquire), r.gen.load(Acquire))).collect(),
        }
    }

    /// Region `r` is unlinked: it is empty now, and a new generation.
    pub fn recycle(&mut self, r: u32) {
        let region = &self.flash.regions[r as usize];
        // Readers that saw the old generation notice; the head gives it
        // its next one when it enters it.
        let gen = self.head.next_gen;
        self.head.next_gen += 1;
        region.gen.store(gen, Release);
        region.end.store(0, Release);
        region.live.store(0, Relaxed);
        self.flash.stats.regions_reclaimed.fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
