//! Bringing a snapshot back at start, before the port opens.
//!
//! The record headers are walked first (a read of 16 bytes per record), so
//! that the loader knows what the file holds before it restores anything:
//! the dictionaries are loaded before the segments that name them. Then
//! each segment is read, checked against its CRC and restored whole into a
//! free segment ([`strata_store::BulkRestore`], which links the items a
//! chunk at a time in index-bucket order) while free segments last (less
//! the writers' reserve); the rest item by item through the write path
//! ([`strata_store::Restorer`]), where the cleaner wins back the dead bytes
//! of what came whole before anything live is evicted. So every item live
//! in the snapshot loads while the live items fit the memory limit, and
//! past it eviction's order applies (records are oldest epoch first). The
//! segment records are read whole, ahead of the
//! loading thread, by a few reader threads, around the page cache where
//! the file system allows it, the file is large and the cache does not
//! hold it already ([`Backend::open_bulk`]: `O_DIRECT` reads of the
//! aligned blocks around each record), and their CRCs checked there;
//! a helper faults in the segments they go into, in huge pages where it
//! can. The loading thread copies each record's bytes into its segment
//! and links the items; [`LoadTimes`] says how long each stage took. A
//! read that fails loses that record only. A damaged segment is dropped
//! and counted (its CRC is checked even when its fields say it is dropped
//! whole, so damage to them is seen); a damaged record header ends the
//! readable part (its length cannot be trusted, and the rest is never
//! searched for something that looks like a header: a client's value may
//! hold one); a truncated file ends it too, and what came before loads.
//! Nothing unchecked is ever served.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use strata_store::{BulkRestore, Queue, RestoreError, Restorer, SegmentImage, Store};

use crate::backend::{read_exact_at, Backend, PosFile};
use crate::format::{self, Footer, FormatError, Header, Kind, Record, SegmentFixed, HEADER_LEN, RECORD_LEN};
use crate::{Progress, SnapshotError};

/// The largest dictionary record a load reads.
const MAX_DICT_RECORD: u32 = 64 << 20;

/// Snapshots from this size on are loaded into transparent huge pages
/// (`Store::huge_pages_for_restore`): fewer faults, and on a virtual machine
/// whose host takes free memory back, fewer host faults too. A huge page
/// comes from a free 2 MiB block, though, where ordinary pages come first
/// from memory freed lately and still backed, and for a small load that is
/// what counts. Measured on this project's VM (docs/benchmarks-history.md,
/// "Snapshot load beside 71ef9bc"; seconds, three loads each): 100 MB warm
/// 0.15-0.23 with huge pages, 0.07 without; cold 0.11-0.20 and 0.09; 5 GB
/// cold 2.8-3.1 with, 7.4-8.8 without. At 1 GB the host's state decided
/// more than the pages (cold 0.51-0.73 with and 1.09-2.19 without in one
/// series, 1.02-1.74 with in the next): kept as it was.
const HUGE_PAGES_FROM: u64 = 512 << 20;

/// What a load brought back and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub bytes: u64,
    pub segments: u64,
    pub items: u64,
    /// Live items not brought back: expired, flushed, or naming a
    /// dictionary this server cannot load (compression off).
    pub dropped_items: u64,
    /// Segment records whose CRC failed (or that failed to read).
    pub damaged_segments: u64,
    /// Segment records left out because the memory limit was reached with
    /// nothing that could be evicted (`-M`).
    pub skipped_segments: u64,
    /// Segment records restored item by item once no free segment was left
    /// (their dead bytes, and the dead bytes of those restored whole, are
    /// won back by the cleaner: `strata_store::Restorer`).
    pub loose_segments: u64,
    /// Live items evicted during the load: the snapshot's live items did
    /// not fit the memory limit (a smaller `-m` than it was taken with).
    pub evicted: u64,
    /// The file ended early, or a record header was damaged: the rest is lost.
    pub truncated: bool,
    /// The footer was read (the snapshot was complete when written).
    pub complete: bool,
    pub duration: Duration,
    /// Wall time the snapshot was started, unix seconds.
    pub snapshot_unix: i64,
    /// The first durability log file to replay over it.
    pub log_seq: u64,
    /// Flash items linked again, and those saved but not brought back
    /// (see `strata_store::FlashRestored`).
    pub flash_items: u64,
    pub flash_dropped: u64,
    /// Where the time went, stage by stage (boxed: it is as large as the
    /// rest of the report, and read once).
    pub times: Box<LoadTimes>,
}

/// Where a load's time went (logged at start, for operators and for
/// tuning the loader). The loading thread's stages add up to about
/// `duration`; the helper's run beside them, on another core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadTimes {
    /// Walking the record headers and loading the dictionaries.
    pub walk: Duration,
    /// Waiting for the reader thread's next record (the disk).
    pub read: Duration,
    /// Copying the records' bytes into their segments.
    pub copy: Duration,
    /// Checking the segments' CRCs (on the reader threads).
    pub crc: Duration,
    /// Putting the items' links in order for the linker (and restoring
    /// the segments' metadata), and waiting for the linker's last chunk.
    pub link: Duration,
    /// The linker thread: linking the items into the index, a chunk at
    /// a time in bucket order.
    pub linker: Duration,
    /// The helper thread: faulting in the segments' pages ahead.
    pub fault: Duration,
    /// CPU time the loading thread and the helper used while the segments
    /// loaded (against the wall time, whether the cores were the limit or
    /// the disk).
    pub loader_cpu: Duration,
    pub helper_cpu: Duration,
    /// Wall time of the segments' part.
    pub segments: Duration,
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

impl LoadReport {
    /// Whether anything in the file was lost to damage.
    pub fn damaged(&self) -> bool {
        self.truncated || self.damaged_segments > 0 || !self.complete
    }
}

/// One record found by the walk.
struct Found {
    kind: Kind,
    at: u64,
    len: u32,
    crc: u32,
}

/// Reads the header of the snapshot `file`: the settings it needs and
/// the clock it continues. `None` if there is no snapshot.
pub fn read_header(backend: &dyn Backend, file: &Path) -> Result<Option<Header>, SnapshotError> {
    let path = file;
    let f = match backend.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SnapshotError::io("open", path, e)),
    };
    header_of(&*f, path).map(Some)
}

/// The footer of the snapshot `file`, if it is whole: how many items and
/// segments it holds, read from its last 64 bytes (to size the index
/// before loading). `None` for a missing, truncated or damaged footer.
pub fn read_footer(backend: &dyn Backend, file: &Path) -> Option<Footer> {
    let f = backend.open(file).ok()?;
    let len = f.size().ok()?;
    let tail = (RECORD_LEN + format::FOOTER_LEN) as u64;
    let at = len.checked_sub(tail).filter(|&at| at >= HEADER_LEN as u64)?;
    let mut b = [0u8; RECORD_LEN + format::FOOTER_LEN];
    if !read_exact_at(&*f, &mut b, at).ok()? {
        return None;
    }
    let mut rb = [0u8; RECORD_LEN];
    rb.copy_from_slice(&b[..RECORD_LEN]);
    let rec = Record::decode(&rb).ok()?;
    let body = &b[RECORD_LEN..];
    let whole = rec.kind == Kind::Footer && rec.len as usize == body.len() && crc32c::crc32c(body) == rec.crc;
    whole.then(|| Footer::decode(body).ok()).flatten()
}

fn header_of(f: &dyn PosFile, path: &Path) -> Result<Header, SnapshotError> {
    let mut b = [0u8; HEADER_LEN];
    if !read_exact_at(f, &mut b, 0).map_err(|e| SnapshotError::io("read", path, e))? {
        return Err(SnapshotError::Format(FormatError::BadMagic));
    }
    Ok(Header::decode(&b)?)
}

/// Checks that this server can restore a snapshot taken with `h`.
pub fn check_settings(h: &Header, store: &Store) -> Result<(), SnapshotError> {
    let cfg = store.config();
    let mismatch = |what, snap: u64, here: u64| Err(SnapshotError::Mismatch { what, snapshot: snap, server: here });
    if h.item_size_max as usize != cfg.item_size_max {
        return mismatch("item size limit (-I)", h.item_size_max.into(), cfg.item_size_max as u64);
    }
    if h.segment_size as usize != cfg.segment_size {
        return mismatch("segment size", h.segment_size.into(), cfg.segment_size as u64);
    }
    if h.cas != cfg.cas {
        return mismatch("CAS (-C)", h.cas.into(), cfg.cas.into());
    }
    Ok(())
}

/// Loads the snapshot `file` into `store`, which must be new, built on a
/// clock resumed from the snapshot's header (`Clock::resumed`) and not yet
/// written to. `workers` is how many workers will write (their reserve is
/// left free). `epoch_floor` is the epoch lease, if one was read. With
/// `strict`, any damage is an error instead of a report.
pub fn load(
    store: &Store,
    backend: &dyn Backend,
    file: &Path,
    workers: usize,
    epoch_floor: u64,
    strict: bool,
) -> Result<LoadReport, SnapshotError> {
    let started = Instant::now();
    let path = file.to_path_buf();
    let f = backend.open(&path).map_err(|e| SnapshotError::io("open", &path, e))?;
    let header = header_of(&*f, &path)?;
    check_settings(&header, store)?;
    let file_len = f.size().map_err(|e| SnapshotError::io("stat", &path, e))?;
    let mut report = LoadReport { snapshot_unix: header.unix_time, log_seq: header.log_seq, ..LoadReport::default() };

    let (found, footer) = walk(&*f, &path, file_len, &mut report);
    report.complete = footer.is_some();
    if strict && report.damaged() {
        return Err(SnapshotError::Damaged(format!("{} is truncated or its footer is damaged", path.display())));
    }

    resume_as_saved(store, &header, footer, epoch_floor);
    let dicts = read_dicts(&*f, &found, &path, &mut report)?;
    let held = store.load_dicts(&dicts);
    let mut times = LoadTimes { walk: started.elapsed(), ..LoadTimes::default() };

    let segments: Vec<&Found> = found.iter().filter(|r| r.kind == Kind::Segment).collect();
    let room = store.segments_available(workers);
    let mut progress = Progress::new("snapshot load");
    progress.set_total(segments.iter().map(|r| u64::from(r.len)).sum());
    // Once no free segment is left, the rest is restored item by item,
    // the cleaner winning back the dead bytes of what came whole before
    // anything live is evicted (`strata_store::Restorer`).
    let mut loader = Segments {
        store,
        path: &path,
        room,
        strict,
        img: SegmentImage::default(),
        bulk: store.bulk_restore(),
        restorer: None,
        max_epoch: 0,
        loaded: 0,
    };
    // Threads work ahead of the loading one. Readers read each record
    // whole, around the page cache for a large file it does not hold
    // ([`Backend::open_bulk`]), into one of a
    // few buffers, and check its CRC; most of their time they wait for the
    // disk. A helper faults in the pages of the segment each record will go
    // into (on a large snapshot the kernel's zeroing of fresh pages was half
    // the load's time). The helper is not held back to a distance ahead:
    // measured on 5 M items, staying 64 records ahead loaded in 5.0 s
    // (median of 5), running free in 2.5 s.
    let bulk = backend.open_bulk(&path).map_err(|e| SnapshotError::io("open", &path, e))?;
    let ahead = store.next_free_segments(segments.len().min(room));
    let huge = file_len >= HUGE_PAGES_FROM;
    if huge {
        store.huge_pages_for_restore(&ahead, true);
    }
    let stop = AtomicBool::new(false);
    // No more readers than records: a small snapshot (a test's, or the
    // crash simulator's thousands of loads) starts no idle threads.
    let reader_count = READERS.min(segments.len()).max(1);
    let (full_rx, free_tx, readers) = reader_channels(reader_count);
    let result = std::thread::scope(|scope| {
        let (bulk, todo) = (&*bulk, &segments[..]);
        // Record j is read by reader j % reader_count, and taken from it in
        // turn. A reader checks each record's CRC too: the loading thread
        // has the most to do.
        let readers: Vec<_> = readers
            .into_iter()
            .enumerate()
            .map(|(k, (full, free))| {
                scope.spawn(move || read_records(bulk, todo.iter().skip(k).step_by(reader_count), &full, &free))
            })
            .collect();
        let helper = scope.spawn(|| prefault(store, &ahead, &stop));
        // Another thread links the items a chunk at a time while this one
        // restores the next segments (`strata_store::BulkRestore`).
        let chunks = loader.bulk.link_elsewhere();
        let linker = scope.spawn(move || chunks.run(store));
        let (cpu, wall) = (thread_cpu(), Instant::now());
        // Caught so that the linker, which runs until the loader finishes,
        // is let go before the scope waits for it.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            loader.load_records(&segments, &full_rx, &free_tx, &mut report, &mut times, &mut progress)
        }));
        let link = Instant::now();
        loader.bulk.finish();
        times.link += link.elapsed();
        let r = r.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // A linker that panicked lost the links of the chunk it had: the
        // load must not go on as if they were made.
        times.linker = linker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if let Some(restorer) = loader.restorer.take() {
            report.evicted = restorer.evicted();
        }
        stop.store(true, Relaxed);
        // The reader stops at its next buffer or send.
        drop(full_rx);
        drop(free_tx);
        (times.loader_cpu, times.segments) = (thread_cpu().saturating_sub(cpu), wall.elapsed());
        if let Ok((fault, cpu)) = helper.join() {
            (times.fault, times.helper_cpu) = (fault, cpu);
        }
        times.crc = readers.into_iter().filter_map(|h| h.join().ok()).sum();
        r
    });
    if huge {
        store.huge_pages_for_restore(&ahead, false);
    }
    store.release_dicts(held);
    store.resume(loader.max_epoch, 0, 0);
    result?;
    load_flash(store, &*f, &found, &path, &mut report, strict)?;
    report.bytes = file_len;
    report.duration = started.elapsed();
    report.times = Box::new(times);
    progress.done(loader.loaded);
    Ok(report)
}

/// The segment records, loaded one by one: whole into free segments while
/// there are some, then item by item, the cleaner winning back the dead
/// bytes of what came whole before anything live is evicted
/// (`strata_store::Restorer`).
struct Segments<'s> {
    store: &'s Store,
    /// The snapshot's path, for what is logged.
    path: &'s Path,
    /// Free segments to load into whole.
    room: usize,
    strict: bool,
    img: SegmentImage,
    /// Restores whole segments, their links made in bucket order.
    bulk: BulkRestore<'s>,
    restorer: Option<Restorer<'s>>,
    /// The highest epoch of a segment loaded whole.
    max_epoch: u64,
    /// Bytes of segment records taken so far.
    loaded: u64,
}

/// What one segment record came to.
enum Next {
    /// Loaded, or found damaged and counted.
    Loaded,
    /// Its bytes could not be read or its lists parsed: counted damaged.
    Unread,
    /// Nothing more fits, not even item by item (`-M`).
    Full,
}

impl Segments<'_> {
    /// Takes the segment records from the readers in turn (record `i`
    /// from reader `i % readers`) and loads each, giving each buffer back
    /// to its reader.
    fn load_records(
        &mut self,
        segments: &[&Found],
        full_rx: &[Receiver<Full>],
        free_tx: &[Sender<Aligned>],
        report: &mut LoadReport,
        times: &mut LoadTimes,
        progress: &mut Progress,
    ) -> Result<(), SnapshotError> {
        let readers = full_rx.len();
        for (i, r) in segments.iter().enumerate() {
            let k = i % readers;
            let t = Instant::now();
            let got = full_rx[k].recv();
            times.read += t.elapsed();
            let (buf, read, crc_ok) = match got {
                Ok((buf, read, crc_ok)) => (Some(buf), read, crc_ok),
                Err(_) => (None, Ok(false), false),
            };
            let read = read.unwrap_or_else(|e| {
                tracing::warn!(path = %self.path.display(), at = r.at, error = %e, "snapshot read failed");
                false
            });
            let body = buf.as_ref().filter(|_| read).map(Aligned::bytes);
            let next = self.record(r, body, crc_ok, report, times);
            if let Some(b) = buf {
                let _ = free_tx[k].send(b);
            }
            match next? {
                Next::Loaded => {}
                Next::Unread => continue,
                Next::Full => {
                    // Not even item by item: with -M, live data past the
                    // limit (nothing is evicted).
                    report.skipped_segments += (segments.len() - i) as u64;
                    break;
                }
            }
            self.loaded += u64::from(r.len);
            progress.at(self.loaded);
        }
        Ok(())
    }

    /// Loads record `r`, `body` its bytes if they could be read and
    /// `crc_ok` whether they match its CRC (checked by a reader thread).
    fn record(
        &mut self,
        r: &Found,
        body: Option<&[u8]>,
        crc_ok: bool,
        report: &mut LoadReport,
        times: &mut LoadTimes,
    ) -> Result<Next, SnapshotError> {
        let Some((lists_len, bytes_len)) = body.and_then(|b| segment_meta(b, &mut self.img)) else {
            report.damaged_segments += 1;
            if self.strict {
                return Err(SnapshotError::Damaged(format!("segment record at byte {} is unreadable", r.at)));
            }
            return Ok(Next::Unread);
        };
        let (store, img) = (self.store, &self.img);
        let bytes = &body.unwrap_or_default()[lists_len..];
        // The reader checked the record's CRC, so nothing unchecked
        // links; a segment dropped whole (expired, flushed, nothing
        // live) is checked all the same, so that damage to the
        // fields that decided it is seen.
        let mut copy_t = Duration::ZERO;
        let t = Instant::now();
        let restored = if !crc_ok {
            Err(RestoreError::Rejected)
        } else if self.restorer.is_none() && report.segments < self.room as u64 {
            self.bulk.restore_with(img, bytes_len, &mut |dst| {
                let t = Instant::now();
                dst.copy_from_slice(bytes);
                copy_t = t.elapsed();
                true
            })
        } else {
            Err(RestoreError::Full)
        };
        let restored = match restored {
            Err(RestoreError::Full) if bytes.len() == bytes_len => {
                report.loose_segments += 1;
                // The item-by-item restore writes through the index:
                // every whole segment's links first, so the versions of a
                // key keep the file's order.
                self.bulk.finish();
                self.restorer.get_or_insert_with(|| store.restorer()).restore(img, bytes)
            }
            r => r,
        };
        times.link += t.elapsed().saturating_sub(copy_t);
        times.copy += copy_t;
        match restored {
            Ok(x) => {
                // Without a footer the epochs may have gone past the
                // header's: new ones start above every checked segment's.
                if x.used_segment {
                    self.max_epoch = self.max_epoch.max(img.epoch);
                }
                report.items += x.items;
                report.dropped_items += x.dropped + x.malformed;
                report.segments += u64::from(x.used_segment);
            }
            Err(RestoreError::Full) => return Ok(Next::Full),
            Err(RestoreError::Rejected | RestoreError::TooLarge(_)) => {
                report.damaged_segments += 1;
                if self.strict {
                    return Err(SnapshotError::Damaged(format!("segment record at byte {} fails its CRC", r.at)));
                }
            }
        }
        Ok(Next::Loaded)
    }
}

/// The walk: every record header, nothing else, up to the footer, the
/// end of the file or the first damaged header (the rest of the file is
/// then lost: see below). Returns the records found and the footer if it
/// is whole.
fn walk(f: &dyn PosFile, path: &Path, file_len: u64, report: &mut LoadReport) -> (Vec<Found>, Option<Footer>) {
    let mut found = Vec::new();
    let mut footer = None;
    let mut at = HEADER_LEN as u64;
    loop {
        let mut rb = [0u8; RECORD_LEN];
        if at == file_len {
            report.truncated = true;
            break;
        }
        // A read error ends the readable part, as damage would.
        let read = read_exact_at(f, &mut rb, at).unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), at, error = %e, "snapshot read failed");
            false
        });
        let rec = if read { Record::decode(&rb).ok() } else { None };
        let Some(rec) = rec.filter(|r| at + (RECORD_LEN as u64) + u64::from(r.len) <= file_len) else {
            // A damaged header's length cannot be trusted, and the bytes
            // after it are not searched for a header: a value a client
            // stored may hold one (issue 41). The rest of the file is lost.
            tracing::warn!(path = %path.display(), at, lost = file_len - at, "snapshot: damaged record header; the rest of the file is not read");
            report.damaged_segments += 1;
            report.truncated = true;
            break;
        };
        let body_at = at + RECORD_LEN as u64;
        at = body_at + u64::from(rec.len);
        if rec.kind == Kind::Footer {
            let mut b = [0u8; format::FOOTER_LEN];
            let ok = rec.len as usize == b.len()
                && read_exact_at(f, &mut b, body_at).unwrap_or(false)
                && crc32c::crc32c(&b) == rec.crc;
            footer = ok.then(|| Footer::decode(&b).ok()).flatten();
            report.truncated = footer.is_none();
            break;
        }
        found.push(Found { kind: rec.kind, at: body_at, len: rec.len, crc: rec.crc });
    }
    (found, footer)
}

/// Where the old store stood: its epochs (the last handed out, so that no
/// CAS repeats), its flush (as of the cut the items are from; a version 1
/// snapshot's items are as of its end).
fn resume_as_saved(store: &Store, header: &Header, footer: Option<Footer>, epoch_floor: u64) {
    let epoch = footer.map_or(header.epoch, |ft| ft.epoch);
    let (flush_epoch, flush_at) = match footer {
        Some(ft) if header.version < 2 => (ft.flush_epoch, ft.flush_at),
        _ => (header.flush_epoch, header.flush_at),
    };
    store.resume(epoch.max(epoch_floor), flush_epoch, flush_at);
}

/// The compression dictionaries' records, decoded; a damaged one is
/// counted and left out.
fn read_dicts(
    f: &dyn PosFile,
    found: &[Found],
    path: &Path,
    report: &mut LoadReport,
) -> Result<Vec<strata_compress::SavedDict>, SnapshotError> {
    let mut body = Vec::new();
    let mut dicts = Vec::new();
    for r in found.iter().filter(|r| r.kind == Kind::Dict) {
        // A trained dictionary is at most a few MiB (`-o
        // compression_dict_size`): a record claiming more is not read.
        if r.len > MAX_DICT_RECORD {
            report.damaged_segments += 1;
            continue;
        }
        match read_body(f, r, &mut body, path)? {
            true => match format::decode_dict(&body) {
                Ok(d) => dicts.push(d),
                Err(_) => report.damaged_segments += 1,
            },
            false => report.damaged_segments += 1,
        }
    }
    Ok(dicts)
}

/// The flash tier's records, after the segments (a key in memory wins).
fn load_flash(
    store: &Store,
    f: &dyn PosFile,
    found: &[Found],
    path: &Path,
    report: &mut LoadReport,
    strict: bool,
) -> Result<(), SnapshotError> {
    let Some(state) = found.iter().rfind(|r| r.kind == Kind::FlashState) else { return Ok(()) };
    let mut body = Vec::new();
    let damaged = |report: &mut LoadReport| {
        report.damaged_segments += 1;
        if strict {
            return Err(SnapshotError::Damaged(format!("{}: the flash tier's records are damaged", path.display())));
        }
        Ok(())
    };
    if state.len as usize > format::FLASH_STATE_FIXED + 16 * (1 << 24) || !read_body(f, state, &mut body, path)? {
        return damaged(report);
    }
    let Ok(checkpoint) = format::decode_flash_state(&body) else { return damaged(report) };
    let mut entries = Vec::new();
    for r in found.iter().filter(|r| r.kind == Kind::FlashEntries) {
        if r.len as usize > 8 * format::FLASH_ENTRIES_PER_RECORD || r.len % 8 != 0 || !read_body(f, r, &mut body, path)?
        {
            damaged(report)?;
            continue;
        }
        entries
            .extend(body.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])));
    }
    entries.sort_unstable();
    let restored = store.restore_flash(&strata_store::FlashImage { checkpoint, entries });
    if restored.mismatch && store.config().flash.is_none() {
        tracing::warn!(
            "snapshot: it holds {} flash items; without -o ext_path they are not brought back",
            restored.dropped
        );
    } else if restored.mismatch {
        tracing::warn!(
            "snapshot: its flash items are for another ext_path layout (size or page size); {} not brought back",
            restored.dropped
        );
    }
    report.flash_items = restored.items;
    report.flash_dropped = restored.dropped;
    Ok(())
}

/// Reads a record's body into `body`; false if its CRC fails.
fn read_body(f: &dyn PosFile, r: &Found, body: &mut Vec<u8>, path: &Path) -> Result<bool, SnapshotError> {
    body.clear();
    body.resize(r.len as usize, 0);
    match read_exact_at(f, body, r.at) {
        Ok(true) => Ok(crc32c::crc32c(body) == r.crc),
        Ok(false) => Ok(false),
        // A read error is damage to this record, not the end of the load.
        Err(e) => {
            tracing::warn!(path = %path.display(), at = r.at, error = %e, "snapshot read failed");
            Ok(false)
        }
    }
}

/// Decodes a segment record's `body` (read whole) into `img`: its fixed
/// part and lists; the length of those, and of its bytes, which follow.
/// `None` if the record is malformed.
fn segment_meta(body: &[u8], img: &mut SegmentImage) -> Option<(usize, usize)> {
    let fixed = body.get(..format::SEGMENT_FIXED)?;
    let meta = SegmentFixed::decode(fixed, body.len()).ok()?;
    let lists_len = format::SEGMENT_FIXED + 4 * meta.live as usize + 8 * meta.times as usize;
    format::decode_segment_lists(body.get(..lists_len)?, &meta, &mut img.live, &mut img.write_times);
    img.epoch = meta.epoch;
    img.queue = if meta.main { Queue::Main } else { Queue::Small };
    img.max_expire = meta.max_expire;
    img.dicts = 0;
    img.bytes.clear();
    Some((lists_len, meta.bytes as usize))
}

mod read;
use read::{prefault, read_records, reader_channels, Aligned, Full, READERS};

#[cfg(test)]
mod tests;
