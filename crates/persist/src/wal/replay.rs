//! Reading the log back: records in order up to the first that is not
//! whole, and recovery (a snapshot's files replayed into the store, the
//! torn tail trimmed).

use super::*;

/// One record read back from a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub op: Op,
    pub payload: Vec<u8>,
}

/// What reading a log file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    pub records: u64,
    /// Reading stopped before the file's end at something that is not a
    /// whole record (a crash mid-append, or damage) with non-zero bytes
    /// after it. A zero tail is not torn.
    pub torn: bool,
    /// Where the readable part ends: the offset after the last whole
    /// record (the header's end if none; 0 if the header is not whole).
    pub end: u64,
    /// The file's length when read.
    pub len: u64,
}

/// Reads log file `path`, handing each whole record to `apply` in order,
/// up to the first place where no whole record begins (see the module
/// doc, "Reading back"): what follows is never read, so no byte inside a
/// record's payload is ever taken for a record.
pub fn read_log(backend: &dyn Backend, path: &Path, apply: &mut dyn FnMut(Entry)) -> Result<Replayed, SnapshotError> {
    let f = backend.open(path).map_err(|e| SnapshotError::io("open", path, e))?;
    let len = f.size().map_err(|e| SnapshotError::io("stat", path, e))?;
    let mut out = Replayed { len, ..Replayed::default() };
    let mut h = [0u8; LOG_HEADER_LEN];
    if !read_exact_at(&*f, &mut h, 0).unwrap_or(false) || h[..8] != LOG_MAGIC {
        // A file created but never written past its header is empty.
        out.torn = len != 0;
        return Ok(out);
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    // Version 1 is the same format without time records.
    if !(1..=LOG_VERSION).contains(&version) {
        return Err(SnapshotError::Format(crate::format::FormatError::Version { found: version }));
    }
    let mut at = LOG_HEADER_LEN as u64;
    // Read in large chunks; records may span them.
    let mut r = Reader { f: &*f, chunk: Vec::new(), chunk_at: at, len };
    while let Some((op, payload, next)) = r.record(at) {
        apply(Entry { op, payload });
        out.records += 1;
        at = next;
    }
    out.end = at;
    // Zeros from here to the end are the preallocated tail: the log ends
    // here, whole (no record begins with a zero byte). Anything else is a
    // torn tail or damage, and ends the file's readable part all the same.
    out.torn = r.next_nonzero(at).is_some();
    Ok(out)
}

/// Reads records out of a log file through a 4 MiB window.
struct Reader<'a> {
    f: &'a dyn crate::backend::PosFile,
    chunk: Vec<u8>,
    chunk_at: u64,
    len: u64,
}

impl Reader<'_> {
    /// The whole record at `at` (kind known, zero bytes zero, payload in
    /// the file, CRC right), and where the next begins.
    fn record(&mut self, at: u64) -> Option<(Op, Vec<u8>, u64)> {
        let mut head = [0u8; RECORD_HEAD];
        if !read_at(self.f, &mut self.chunk, &mut self.chunk_at, at, &mut head, self.len) {
            return None;
        }
        let op = Op::from_u8(head[0]).filter(|_| head[1..4] == [0, 0, 0])?;
        let plen = u64::from(u32::from_le_bytes([head[4], head[5], head[6], head[7]]));
        let crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if at + RECORD_HEAD as u64 + plen > self.len {
            return None;
        }
        let mut payload = vec![0u8; plen as usize];
        if !read_at(self.f, &mut self.chunk, &mut self.chunk_at, at + RECORD_HEAD as u64, &mut payload, self.len) {
            return None;
        }
        (crc32c::crc32c_append(crc32c::crc32c(&head[..8]), &payload) == crc).then_some((
            op,
            payload,
            at + RECORD_HEAD as u64 + plen,
        ))
    }

    /// The first offset at or after `from` whose byte is not zero, read a
    /// window at a time (a 64 MiB zero tail is 16 reads and compares).
    fn next_nonzero(&mut self, from: u64) -> Option<u64> {
        let mut at = from;
        while at < self.len {
            let mut b = [0u8; 1];
            // Brings the window that holds `at` in.
            if !read_at(self.f, &mut self.chunk, &mut self.chunk_at, at, &mut b, self.len) {
                return None;
            }
            let off = (at - self.chunk_at) as usize;
            if let Some(i) = self.chunk[off..].iter().position(|&b| b != 0) {
                return Some(at + i as u64);
            }
            at = self.chunk_at + self.chunk.len() as u64;
        }
        None
    }
}

/// Copies `dst.len()` bytes at `at` out of the file through a 4 MiB window.
fn read_at(
    f: &dyn crate::backend::PosFile,
    chunk: &mut Vec<u8>,
    chunk_at: &mut u64,
    at: u64,
    dst: &mut [u8],
    len: u64,
) -> bool {
    const WINDOW: u64 = 4 << 20;
    let end = at + dst.len() as u64;
    if end > len {
        // The file ends inside what was asked for: a torn tail.
        return false;
    }
    if at < *chunk_at || end > *chunk_at + chunk.len() as u64 {
        let size = (dst.len() as u64).max(WINDOW).min(len - at);
        chunk.clear();
        chunk.resize(size as usize, 0);
        if !read_exact_at(f, chunk, at).unwrap_or(false) {
            return false;
        }
        *chunk_at = at;
    }
    let from = (at - *chunk_at) as usize;
    dst.copy_from_slice(&chunk[from..from + dst.len()]);
    true
}

/// What a recovery replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    pub files: u64,
    /// Changes replayed (time records are not counted).
    pub records: u64,
    /// Records that could not be applied (malformed, or an item over `-I`).
    pub skipped: u64,
    /// Files whose readable part ended before non-zero bytes (a crash
    /// mid-write, or damage): the rest of each was not read.
    pub torn: u64,
    /// Bytes cut off the files replayed, past their readable ends: zeros
    /// filled ahead and torn tails (see the module doc, "Trimming").
    pub trimmed: u64,
    /// The highest log file number found (0: none).
    pub last: u64,
    /// The timeline of the first time record replayed (the unix time of
    /// its 0), and the latest time on it any record replayed carries (the
    /// module doc, "Time").
    pub time: Option<(i64, u32)>,
}

/// A time record's payload: the timeline's start and the time on it.
fn time_of(payload: &[u8]) -> Option<(i64, u32)> {
    let (started, now) = payload.split_at_checked(8)?;
    Some((i64::from_le_bytes(started.try_into().ok()?), u32::from_le_bytes(now.try_into().ok()?)))
}

/// The timeline the log files beside the snapshot `file` are on: that of
/// the first file that begins with a time record (a server's files all
/// do, and all carry the timeline the first one began), and its time
/// there. What a recovery with no snapshot to resume the clock from
/// resumes it from.
pub fn timeline(backend: &dyn Backend, file: &Path) -> Option<(i64, u32)> {
    log_files(backend, file).into_iter().find_map(|(_, path)| {
        let f = backend.open(&path).ok()?;
        let len = f.size().ok()?;
        let mut h = [0u8; LOG_HEADER_LEN];
        if !read_exact_at(&*f, &mut h, 0).unwrap_or(false) || h[..8] != LOG_MAGIC {
            return None;
        }
        let at = LOG_HEADER_LEN as u64;
        let (op, payload, _) = Reader { f: &*f, chunk: Vec::new(), chunk_at: at, len }.record(at)?;
        (op == Op::Time).then(|| time_of(&payload)).flatten()
    })
}

/// Replays every log file beside the snapshot `file` numbered `from` or
/// more, oldest first, through `w` (a worker of the store being recovered,
/// before it serves).
pub fn replay(
    backend: &dyn Backend,
    file: &Path,
    from: u64,
    w: &mut strata_store::Worker,
) -> Result<Recovery, SnapshotError> {
    let mut r = Recovery::default();
    w.replaying();
    let files = log_files(backend, file);
    // A log left by a long durable run can be gigabytes: the replay logs
    // its progress, against the files' sizes (what cannot be sized counts
    // as nothing; read_log reports the error).
    let sizes: Vec<u64> = files
        .iter()
        .map(|(n, path)| if *n < from { 0 } else { backend.open(path).and_then(|f| f.size()).unwrap_or(0) })
        .collect();
    let mut progress = crate::Progress::new("durability log replay");
    progress.set_total(sizes.iter().sum());
    // Bytes of the files done.
    let mut done = 0u64;
    let mut time = None;
    for ((n, path), size) in files.into_iter().zip(sizes) {
        r.last = r.last.max(n);
        if n < from {
            continue;
        }
        r.files += 1;
        let mut skipped = 0;
        let mut records = r.records;
        // Time records read in this file (not changes: not counted).
        let mut times = 0;
        // Bytes of the whole records read so far in this file.
        let mut bytes = 0u64;
        let read = read_log(backend, &path, &mut |e| {
            bytes += (RECORD_HEAD + e.payload.len()) as u64;
            if e.op == Op::Time {
                times += 1;
                match (time_of(&e.payload), &mut time) {
                    (Some(t), None) => time = Some(t),
                    (Some((started, now)), Some((on, latest))) if started == *on => *latest = now.max(*latest),
                    _ => {}
                }
            } else if apply(w, &e).is_err() {
                skipped += 1;
            }
            records += 1;
            // Looking at the clock once every few thousand records keeps
            // it off the replay's cost.
            if records.is_multiple_of(4096) {
                progress.at_records(done + bytes, records);
            }
        })?;
        done += size;
        r.trimmed += trim(backend, &path, &read);
        r.records += read.records - times;
        r.skipped += skipped;
        r.torn += u64::from(read.torn);
    }
    progress.done(done);
    r.time = time;
    Ok(r)
}

/// Cuts a replayed file to its readable end; the bytes cut. Best effort:
/// a file that cannot be cut is read the same way next time, and only
/// takes more disk.
fn trim(backend: &dyn Backend, path: &Path, read: &Replayed) -> u64 {
    if read.len <= read.end {
        return 0;
    }
    if read.torn {
        tracing::warn!(
            file = %path.display(),
            readable = read.end,
            dropped = read.len - read.end,
            "durability log: a torn or damaged tail is dropped"
        );
    }
    match backend.truncate(path, read.end) {
        Ok(()) => read.len - read.end,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "durability log: cannot cut a replayed file to its records");
            0
        }
    }
}

fn apply(w: &mut strata_store::Worker, e: &Entry) -> Result<(), ()> {
    let p = &e.payload;
    match e.op {
        Op::Item => {
            let (cas, item) = p.split_at_checked(8).ok_or(())?;
            let cas = u64::from_le_bytes(cas.try_into().map_err(|_| ())?);
            w.replay_item(cas, item).map_err(|_| ())
        }
        Op::Delete => {
            w.replay_delete(p);
            Ok(())
        }
        Op::Touch => {
            let (e, key) = p.split_at_checked(4).ok_or(())?;
            w.replay_in_place(key, Some(u32::from_le_bytes(e.try_into().map_err(|_| ())?)), None);
            Ok(())
        }
        Op::State => {
            let (&b, key) = p.split_first().ok_or(())?;
            w.replay_in_place(key, None, Some(b));
            Ok(())
        }
        Op::Flush => {
            w.replay_flush();
            Ok(())
        }
        Op::FlushAt => {
            let at = u32::from_le_bytes(p.as_slice().try_into().map_err(|_| ())?);
            w.replay_flush_at(at);
            Ok(())
        }
        // Read by `replay`, not applied to the store.
        Op::Time => Ok(()),
    }
}
