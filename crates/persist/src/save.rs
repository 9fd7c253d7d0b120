//! Writing a snapshot while the server serves.
//!
//! **Point in time.** A snapshot saves the cache as it was at its *cut*
//! (`strata_store`'s cut.rs): the log switches files first (with
//! `--durability`), then the store marks every segment in use as the
//! cut's, and from then on nothing is linked into them and every item of
//! theirs unlinked is noted, so that a copy made later still saves what was
//! live at the cut. The workers are asked to seal the segments they were
//! writing (a segment being written has no consistent image); the snapshot
//! copies the cut's sealed segments one at a time, oldest epoch first
//! ([`Store::image`]), and the images of segments that eviction or the
//! cleaner freed before it came to them, which the freeing thread made
//! ([`Store::take_handoff`]), until no segment of the cut is left. Nothing
//! written after the cut is in it: the snapshot holds every key
//! acknowledged before it began, with the value it had at the cut (a later
//! one if the write raced the cut), and no key deleted or flushed before.
//! Its size is bounded by the memory in use at the cut: one version of each
//! key at most, and no segment twice.
//!
//! If the store cannot keep the cut (segments freed faster than the
//! snapshot writes them, past the hand-off queue's bound; or too many
//! deaths to note), or a worker does not seal within [`SEAL_TIMEOUT`], the
//! snapshot fails and the previous one stays: a snapshot is never written
//! without what it promises.

use std::path::Path;
use std::time::{Duration, Instant};

use strata_store::{SegmentImage, Store};

use crate::backend::{write_all, Backend, WriteFile};
use crate::format::{self, Footer, Header, Kind, Record, SegmentFixed};
use crate::{Progress, SnapshotError, TMP_SUFFIX};

/// How long a snapshot waits for the segments of its cut to be sealed
/// (workers seal between two turns of their event loop; they are asked
/// again while it waits) before it fails.
pub const SEAL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the server does for a snapshot while it is taken. Any `FnMut()`
/// is one that only seals.
pub trait Saver {
    /// Called first: with `--durability`, switches the log to a new file
    /// and returns its number, which the snapshot records as where replay
    /// starts (0: no log).
    fn begin(&mut self) -> u64 {
        0
    }
    /// Asks every worker (and the reclaimer) to seal the segments it
    /// writes; need not wait for them. The snapshot waits for the store to
    /// say its cut is sealed, and calls this again every millisecond or so
    /// meanwhile (a saver may ask less often). At shutdown, with the
    /// workers gone, there is nothing to do.
    fn seal(&mut self);
    /// Called after each segment record, with the bytes written so far.
    fn progress(&mut self, _bytes: u64) {}
}

impl<F: FnMut()> Saver for F {
    fn seal(&mut self) {
        self()
    }
}

/// What a finished snapshot wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveReport {
    pub bytes: u64,
    pub segments: u64,
    /// Live items copied (one version of each key at most).
    pub items: u64,
    /// Segments of the cut copied by the thread that freed them before the
    /// snapshot came to them (eviction, the cleaner).
    pub handed_off: u64,
    /// How long the threads that freed those segments waited, all told,
    /// for the snapshot to take their copies (its hand-off queue full).
    pub writers_waited: Duration,
    pub dicts: u64,
    /// Flash items whose slots were saved (with `-o ext_path`).
    pub flash_items: u64,
    /// Rounds of copying: each lists the cut's segments sealed by then.
    pub passes: u32,
    pub duration: Duration,
    /// Wall time it started, unix seconds.
    pub started_unix: i64,
    /// The log file replay starts from (0: no log); the ones before it may
    /// be deleted now.
    pub log_seq: u64,
}

struct Out<'a> {
    f: Box<dyn WriteFile>,
    bytes: u64,
    path: &'a Path,
}

impl Out<'_> {
    fn write(&mut self, b: &[u8]) -> Result<(), SnapshotError> {
        write_all(&mut *self.f, b).map_err(|e| SnapshotError::io("write", self.path, e))?;
        self.bytes += b.len() as u64;
        Ok(())
    }

    fn record(&mut self, kind: Kind, pieces: &[&[u8]]) -> Result<(), SnapshotError> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        let len = u32::try_from(len).map_err(|_| SnapshotError::TooLarge)?;
        let crc = pieces.iter().fold(0, |c, p| crc32c::crc32c_append(c, p));
        self.write(&Record { kind, len, crc }.encode())?;
        for p in pieces {
            self.write(p)?;
        }
        Ok(())
    }
}

/// Writes a snapshot of `store` to `file`, replacing the previous one only
/// once the new one is complete and on disk. `saver` seals the workers'
/// segments before each pass and hears of progress.
pub fn save(
    store: &Store,
    backend: &dyn Backend,
    file: &Path,
    saver: &mut dyn Saver,
) -> Result<SaveReport, SnapshotError> {
    let path = file;
    let tmp = crate::with_suffix(file, TMP_SUFFIX);
    let dir = crate::dir_of(file);
    let f = backend.create_bulk(&tmp).map_err(|e| SnapshotError::io("create", &tmp, e))?;
    let mut out = Out { f, bytes: 0, path: &tmp };
    let mut dicts = 0u64;
    let result = write_body(store, &mut out, saver, &mut dicts);
    store.end_cut();
    // The dictionaries' references are given back whatever happened.
    store.release_dicts(dicts);
    let finish = result.and_then(|mut report| {
        out.f.sync().map_err(|e| SnapshotError::io("fsync", &tmp, e))?;
        backend.rename(&tmp, path).map_err(|e| SnapshotError::io("rename", &tmp, e))?;
        backend.sync_dir(&dir).map_err(|e| SnapshotError::io("fsync directory", &dir, e))?;
        report.bytes = out.bytes;
        Ok(report)
    });
    if finish.is_err() {
        // The previous snapshot (if any) is untouched; the partial one goes.
        let _ = backend.remove(&tmp);
    }
    finish
}

/// A snapshot that replaces the durability log written before it: saves,
/// makes the log durable up to now (records appended while the snapshot
/// ran, items eviction moved out of its reach among them), and only then
/// deletes the log files the snapshot holds the effect of. This is what the
/// server's snapshot thread and the crash simulator both run.
pub fn checkpoint(
    store: &Store,
    backend: &dyn Backend,
    file: &Path,
    wal: Option<&crate::Wal>,
    saver: &mut dyn Saver,
) -> Result<SaveReport, SnapshotError> {
    let report = save(store, backend, file, saver)?;
    let synced = wal.is_none_or(|w| w.sync_now());
    if report.log_seq > 0 && synced {
        crate::wal::trim_before(backend, file, report.log_seq);
    }
    Ok(report)
}

fn write_body(
    store: &Store,
    out: &mut Out<'_>,
    saver: &mut dyn Saver,
    dicts: &mut u64,
) -> Result<SaveReport, SnapshotError> {
    let started = Instant::now();
    // The log switches first: every record in an older file is of a change
    // made before the cut, which the snapshot holds.
    let log_seq = saver.begin();
    let start = store.begin_cut();
    saver.seal();
    let header = Header {
        version: format::VERSION,
        segment_size: start.segment_size as u32,
        item_size_max: start.item_size_max as u32,
        cas: start.cas,
        process_started: store.clock().process_started(),
        now: start.now,
        flush_at: start.flush_at,
        epoch: start.epoch,
        flush_epoch: start.flush_epoch,
        unix_time: start.unix_now,
        log_seq,
    };
    out.write(&header.encode())?;
    let mut report = SaveReport { started_unix: start.unix_now, log_seq, ..SaveReport::default() };
    let mut seg = SegmentOut { img: SegmentImage::default(), live: Vec::new(), times: Vec::new() };
    let mut progress = Progress::new("snapshot save");
    let mut waiting_since = Instant::now();
    loop {
        seg.drain(store, out, &mut report, dicts, saver, &mut progress)?;
        let pending = store.cut_pending();
        if pending.sealed.is_empty() {
            if pending.unsealed == 0 {
                // A freed segment leaves the cut once its image is queued.
                seg.drain(store, out, &mut report, dicts, saver, &mut progress)?;
                break;
            }
            if waiting_since.elapsed() >= SEAL_TIMEOUT {
                return Err(SnapshotError::Cut(format!(
                    "{} segments of its cut were still not sealed after {} s",
                    pending.unsealed,
                    SEAL_TIMEOUT.as_secs()
                )));
            }
            saver.seal();
            store.wait_handoff(Duration::from_millis(1));
            continue;
        }
        waiting_since = Instant::now();
        report.passes += 1;
        progress.set_total(out.bytes + (pending.sealed.len() * store.config().segment_size) as u64);
        for s in pending.sealed {
            seg.drain(store, out, &mut report, dicts, saver, &mut progress)?;
            if store.image(s.segment, &mut seg.img) {
                seg.write(store, out, &mut report, dicts, saver, &mut progress)?;
            }
        }
    }
    report.handed_off = store.handed_off();
    report.writers_waited = store.handoff_waited();
    for d in store.saved_dicts(*dicts) {
        out.record(Kind::Dict, &[&format::encode_dict(&d)])?;
        report.dicts += 1;
    }
    // After the segments: an item that went to flash meanwhile is in one
    // or the other (or both; memory wins at load).
    if let Some(img) = store.flash_image() {
        out.record(Kind::FlashState, &[&format::encode_flash_state(&img.checkpoint)])?;
        let mut body = Vec::new();
        for chunk in img.entries.chunks(format::FLASH_ENTRIES_PER_RECORD) {
            body.clear();
            body.extend(chunk.iter().flat_map(|e| e.to_le_bytes()));
            out.record(Kind::FlashEntries, &[&body])?;
        }
        report.flash_items = img.entries.len() as u64;
        // The records it references are on disk before it is.
        store.sync_flash().map_err(|e| SnapshotError::io("fsync the flash files of", out.path, e))?;
    }
    if let Some(why) = store.cut_failed() {
        return Err(SnapshotError::Cut(why));
    }
    let end = store.store_image();
    let footer = Footer {
        epoch: end.epoch,
        flush_epoch: end.flush_epoch,
        flush_at: end.flush_at,
        now: end.now,
        segments: report.segments,
        items: report.items,
        bytes_before: out.bytes,
    };
    out.record(Kind::Footer, &[&footer.encode()])?;
    report.duration = started.elapsed();
    progress.done(out.bytes);
    Ok(report)
}

/// A segment image on its way into the file, and the buffers its lists are
/// encoded in.
struct SegmentOut {
    img: SegmentImage,
    live: Vec<u8>,
    times: Vec<u8>,
}

impl SegmentOut {
    /// Writes every image handed off so far; fails if the store could not
    /// keep the cut.
    fn drain(
        &mut self,
        store: &Store,
        out: &mut Out<'_>,
        report: &mut SaveReport,
        dicts: &mut u64,
        saver: &mut dyn Saver,
        progress: &mut Progress,
    ) -> Result<(), SnapshotError> {
        while let Some(img) = store.take_handoff() {
            self.img = img;
            self.write(store, out, report, dicts, saver, progress)?;
        }
        match store.cut_failed() {
            Some(why) => Err(SnapshotError::Cut(why)),
            None => Ok(()),
        }
    }

    /// Writes `self.img` as a segment record (nothing if none of its items
    /// is live), keeping one reference per dictionary it names.
    fn write(
        &mut self,
        store: &Store,
        out: &mut Out<'_>,
        report: &mut SaveReport,
        dicts: &mut u64,
        saver: &mut dyn Saver,
        progress: &mut Progress,
    ) -> Result<(), SnapshotError> {
        let img = &self.img;
        // One reference per dictionary is enough until the end.
        store.release_dicts(img.dicts & *dicts);
        *dicts |= img.dicts;
        if img.live.is_empty() {
            return Ok(());
        }
        self.live.clear();
        self.times.clear();
        self.live.extend(img.live.iter().flat_map(|o| o.to_le_bytes()));
        self.times
            .extend(img.write_times.iter().flat_map(|&(o, t)| o.to_le_bytes().into_iter().chain(t.to_le_bytes())));
        let fixed = SegmentFixed {
            epoch: img.epoch,
            main: img.queue == strata_store::Queue::Main,
            max_expire: img.max_expire,
            bytes: img.bytes.len() as u32,
            live: img.live.len() as u32,
            times: img.write_times.len() as u32,
        };
        out.record(Kind::Segment, &[&fixed.encode(), &self.live, &self.times, &img.bytes])?;
        report.segments += 1;
        report.items += img.live.len() as u64;
        progress.at(out.bytes);
        saver.progress(out.bytes);
        Ok(())
    }
}
