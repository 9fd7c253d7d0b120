//! The write-ahead log behind `--durability interval|always`: every change a
//! client makes is appended here, as the store makes it, and recovery after
//! a crash is the last snapshot plus the log since it.
//!
//! ```text
//! log file   = file-header record* zero*
//! file header (16 bytes)
//!  0  magic "STRATAWL"     8
//!  8  format version (2)   u32   (1: no time records; read the same)
//! 12  (zero)               u32
//!
//! record
//!  0  kind                 u8    1 item, 2 delete, 3 touch, 4 state, 5 flush, 6 flush at,
//!                                7 time
//!  1  (zero)               3
//!  4  payload length       u32
//!  8  CRC32C of bytes 0..8 and the payload   u32
//! 12  payload
//!
//! payloads
//!  item      CAS u64, then the item as the store lays it out (crates/store/src/item.rs)
//!  delete    the key
//!  touch     expiry u32 (the timeline's seconds, 0 never), then the key;
//!            read, no longer written (a touch is an item record now)
//!  state     the item's state byte u8, then the key
//!  flush     (none): everything written before it is invalid
//!  flush at  when u32: a flush_all scheduled for then
//!  time      process start i64 (unix seconds of the timeline's 0), now u32:
//!            the timeline the records' times are on, and where it stood
//!
//! zero tail: zeros filled ahead of the writer (preallocation), up to the
//!            file's end; the log ends at the first zero byte where a
//!            record would begin if only zeros follow it
//! ```
//!
//! **Files.** `<snapshot file>.log.<n>`, `n` counting up. A snapshot starts
//! by switching to a new file ([`Wal::rotate`]) and records that number in
//! its header; once the snapshot is on disk, the files before it are
//! deleted. Recovery loads the snapshot and replays every file from its
//! number on, in order. Every record in an earlier file was made before
//! the snapshot began, so the snapshot holds its effect; records in later
//! files may be held too, and replaying them again changes nothing (each
//! carries the whole outcome, not a delta: an item with its CAS, an
//! absolute expiry).
//!
//! **Time.** Expiry times, the flush time and `flush at` are seconds on the
//! timeline of the process that wrote them (`Clock`). A log with no
//! snapshot beside it is the only record of that timeline, and a
//! snapshot's header says only where the clock stood when the snapshot
//! began. So each file's first record is a time record, and another
//! follows whenever the clock has moved since the last (at most one a
//! second, 24 bytes). Recovery resumes the snapshot's timeline, or else
//! the log's ([`timeline`]), and moves the clock up to the latest time the
//! replayed records carry: no expiry grows across a restart and nothing
//! that was seen expired comes back, even when the wall clock has gone
//! back or ran behind the old process's monotonic clock. (A restart used
//! to start a new timeline when only a log was left, so every replayed
//! expiry moved by the old process's uptime: tests/wire/test_durability_clock.py.)
//!
//! **Group commit.** Appending copies the record into a shared buffer under
//! a mutex and returns its log position. One writer thread takes the whole
//! buffer, writes it and (with `always`) fdatasyncs it, then publishes the
//! position that is durable: every record appended while the previous
//! fdatasync ran shares the next one. With `interval`, the writer writes
//! whatever is appended as soon as it is (publishing the position written)
//! and fdatasyncs once a second.
//!
//! **Preallocation.** An fdatasync after an append must also commit the
//! file's new size (and new blocks) to the file system's journal: on ext4
//! on this kind of VM, 150-210 µs a commit against 97 µs for the same
//! write over blocks already written and synced. So under `always` a
//! helper thread of [`Wal::run`] keeps each file filled with zeros, written and synced,
//! [`PREALLOC`] ahead of the writer (again once the writer is within half
//! of it of the end), and the writer's records go over them in place. The
//! fill runs beside the commits: the writer may write up to where a fill
//! begins (its fence; the first fill of a file a rotation starts begins an
//! eighth of it ahead, and the writer grows the file up to there) and
//! waits only if it reaches it. The first file of a run is filled before
//! the server serves ([`Wal::prefill`]). A fill that fails is logged and leaves that file to grow as
//! it is written. The zeros are bytes of the file like others: a power
//! loss before their sync may drop them, which only shortens the tail.
//!
//! **Failure.** If a write or fdatasync fails, the log stops: durability is
//! reported lost (`stats`), the writes waiting on it are not acknowledged
//! (their connections are closed by the server), and later changes are
//! refused before they are made (`WalJournal::failed`).
//!
//! **Reading back.** A file is read from its header, record after record,
//! up to the first place where no whole record begins: a record cut by
//! the file's end, a CRC that fails, an unknown kind, or the zeros filled
//! ahead (no record begins with a zero byte; a zero tail is read a 4 MiB
//! window at a time). That is the file's readable end; nothing after it
//! is read. So a value a client stored is only ever read as the payload
//! of the record that holds it: to be taken for a record its bytes would
//! have to begin where a record begins, and only the writer chains those,
//! each from the end of the last. A torn tail is dropped whole, and damage
//! in the middle of a file (not a crash: every byte before the torn batch
//! was synced) loses the rest of that file, as SQLite's WAL and
//! PostgreSQL stop at the first bad record. The files after it are still
//! replayed: each began at a rotation or a restart, and holds later
//! changes (a key changed only in the lost part keeps its earlier state).
//!
//! **Trimming.** Recovery cuts each file it replayed to its readable end
//! ([`replay`]): the zeros filled ahead and a torn tail go, so that any
//! number of crash-restarts leave the records and one preallocation (the
//! new run's file) on disk, not 64 MiB of zeros a restart.
//!
//! **A crash mid-batch.** The batch being written when the power goes was
//! not acknowledged (its fdatasync had not returned). What of it reached
//! the disk is any set of its 512-byte blocks over the zeros: whole
//! records, a record cut by zeros, zeros then later records. Reading stops
//! at the first record that is not whole, so replay applies a prefix of
//! the batch, in order: a state the cache passed through. A client that
//! was not answered may find its change made or not. Everything before the
//! batch was synced, and the batch's blocks only overwrite zeros (a block
//! shared with the synced end holds the same bytes in its old part), so no
//! acknowledged record is touched.
//!
//! **`interval`.** A reply to a change waits until its record is written
//! to the file (in the page cache, [`Wal::acked`]), not until it is synced:
//! a process crash (kill -9, OOM) loses no acknowledged change, a power
//! loss at most the last second's. The writer writes as soon as a record
//! is appended (group commit, without the fdatasync).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{read_exact_at, write_all, Backend, WriteFile, ZeroFill};
use crate::SnapshotError;

mod replay;
mod writer;

pub use replay::{read_log, replay, timeline, Entry, Recovery, Replayed};
pub use writer::{Wal, WalJournal};

pub const LOG_MAGIC: [u8; 8] = *b"STRATAWL";
pub const LOG_VERSION: u32 = 2;
pub const LOG_HEADER_LEN: usize = 16;
pub const RECORD_HEAD: usize = 12;
/// How far ahead of the writer a server's log file is filled with zeros
/// under `always` ([`Wal::set_prealloc`]): 64 MiB, about two seconds of 1000-byte
/// sets at the fastest `always` rate measured. A file is filled again once
/// the writer is within half of it of the end.
pub const PREALLOC: u64 = 64 << 20;

/// What a log record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Item = 1,
    Delete = 2,
    Touch = 3,
    State = 4,
    Flush = 5,
    FlushAt = 6,
    Time = 7,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Item,
            2 => Op::Delete,
            3 => Op::Touch,
            4 => Op::State,
            5 => Op::Flush,
            6 => Op::FlushAt,
            7 => Op::Time,
            _ => return None,
        })
    }
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// No log.
    Off,
    /// Acknowledged at once; at most a second of acknowledged writes lost.
    Interval,
    /// Acknowledged once on disk.
    Always,
}

/// The name of log file `n` beside the snapshot `file`.
pub fn log_path(file: &Path, n: u64) -> PathBuf {
    crate::with_suffix(file, &format!(".log.{n:06}"))
}

/// Deletes the log files beside `file` numbered below `n` (a snapshot that
/// holds their effect is on disk). Best effort: a file left behind is only
/// replayed again, which changes nothing.
pub fn trim_before(backend: &dyn Backend, file: &Path, n: u64) {
    for (k, path) in log_files(backend, file) {
        if k < n {
            let _ = backend.remove(&path);
        }
    }
}

/// The log files beside `file`, by number, ascending (none if the
/// directory cannot be read).
pub fn log_files(backend: &dyn Backend, file: &Path) -> Vec<(u64, PathBuf)> {
    let dir = crate::dir_of(file);
    let prefix = format!("{}.log.", file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    let mut out: Vec<(u64, PathBuf)> = backend
        .list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| {
            let n = name.to_string_lossy().strip_prefix(&prefix)?.parse::<u64>().ok()?;
            Some((n, dir.join(name)))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_laid_out_as_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        let wal = Wal::open(Arc::new(crate::OsBackend), &file, 7, Durability::Always).unwrap();
        assert_eq!(wal.append(Op::Touch, &[&9u32.to_le_bytes(), b"key"]), (RECORD_HEAD + 7) as u64);
        wal.flush().unwrap();
        let b = std::fs::read(log_path(&file, 7)).unwrap();
        assert_eq!(
            log_path(&file, 7).file_name().map(|n| n.to_string_lossy().into_owned()),
            Some("s.log.000007".into())
        );
        assert_eq!(&b[..16], b"STRATAWL\x02\0\0\0\0\0\0\0");
        assert_eq!(&b[16..24], &[3, 0, 0, 0, 7, 0, 0, 0]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[16..24]), &b[28..]);
        assert_eq!(&b[24..28], &crc.to_le_bytes());
        assert_eq!(&b[28..], b"\x09\0\0\0key");
    }
}
