//! Writing a snapshot while the server serves.
//!
//! The snapshot is taken in passes. Each pass asks the workers to seal
//! their active segments (a segment being written has no consistent
//! image), lists the sealed segments not yet copied, oldest epoch first, and
//! copies each ([`Store::image`]: pinned, item by item under bucket locks)
//! into the file. The first pass copies what the cache held when the
//! snapshot began; the next ones copy what was written (or moved by the
//! cleaner) meanwhile, until a pass finds nothing new or [`MAX_PASSES`] are
//! done. Memory grows by one segment's copy at a time, plus the pins.
//!
//! Every segment sealed when the snapshot begins, or sealed while it runs,
//! is held until copied: the cleaner cannot move its items out of the
//! snapshot's reach (`strata_store` image.rs, "Holds").
//!
//! **What a snapshot holds.** Each item is as it was when its segment was
//! copied, and records are in the order they were copied, so when a key is
//! live in two records the later one is the newer (the loader keeps it).
//! A key deleted during a snapshot may therefore be in it: a snapshot is
//! the cache at some moment between its start and end, per key.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use strata_store::{SegmentImage, Store};

use crate::backend::{write_all, Backend, WriteFile};
use crate::format::{self, Footer, Header, Kind, Record, SegmentFixed};
use crate::{Progress, SnapshotError, TMP_SUFFIX};

/// Passes after the first that catch up with writes made meanwhile.
pub const MAX_PASSES: u32 = 4;

/// What the server does for a snapshot while it is taken. Any `FnMut()`
/// is one that only seals.
pub trait Saver {
    /// Called first: with `--durability`, switches the log to a new file
    /// and returns its number, which the snapshot records as where replay
    /// starts (0: no log).
    fn begin(&mut self) -> u64 {
        0
    }
    /// Asks every worker to seal its active segments, and returns once
    /// they have (at shutdown, with the workers gone, there is nothing to do).
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
    /// Live items copied (a key overwritten during the snapshot may count twice).
    pub items: u64,
    pub dicts: u64,
    /// Flash items whose slots were saved (with `-o ext_path`).
    pub flash_items: u64,
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
    // Held before the log switches, so that nothing logged in the files
    // this snapshot replaces can be moved out of its reach.
    store.hold_for_snapshot();
    let result = write_body(store, &mut out, saver, &mut dicts);
    store.release_snapshot();
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
    let log_seq = saver.begin();
    saver.seal();
    let start = store.store_image();
    let header = Header {
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
    let mut done: HashSet<(u32, u64)> = HashSet::new();
    let mut img = SegmentImage::default();
    let (mut live, mut times) = (Vec::new(), Vec::new());
    let mut progress = Progress::new("snapshot save");
    for pass in 0..=MAX_PASSES {
        if pass > 0 {
            saver.seal();
        }
        let mut todo: Vec<_> =
            store.sealed_segments().into_iter().filter(|s| !done.contains(&(s.segment, s.epoch))).collect();
        if todo.is_empty() {
            break;
        }
        todo.sort_by_key(|s| s.epoch);
        report.passes = pass + 1;
        progress.set_total(out.bytes + (todo.len() * store.config().segment_size) as u64);
        for s in todo {
            done.insert((s.segment, s.epoch));
            if !store.image(s.segment, &mut img) {
                // Evicted or compacted since it was listed.
                continue;
            }
            // Reused and sealed again since it was listed: a newer image,
            // as good as any (and not to be copied again).
            done.insert((s.segment, img.epoch));
            // One reference per dictionary is enough until the end.
            let again = img.dicts & *dicts;
            store.release_dicts(again);
            *dicts |= img.dicts;
            live.clear();
            times.clear();
            live.extend(img.live.iter().flat_map(|o| o.to_le_bytes()));
            times.extend(img.write_times.iter().flat_map(|&(o, t)| o.to_le_bytes().into_iter().chain(t.to_le_bytes())));
            let fixed = SegmentFixed {
                epoch: img.epoch,
                main: img.queue == strata_store::Queue::Main,
                max_expire: img.max_expire,
                bytes: img.bytes.len() as u32,
                live: img.live.len() as u32,
                times: img.write_times.len() as u32,
            };
            out.record(Kind::Segment, &[&fixed.encode(), &live, &times, &img.bytes])?;
            report.segments += 1;
            report.items += img.live.len() as u64;
            progress.at(out.bytes);
            saver.progress(out.bytes);
        }
    }
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
