//! The load's readers: segment records read whole, ahead of the loading
//! thread, by a few threads ([`READERS`]), into aligned buffers around the
//! page cache where the file system allows it, their CRCs checked there;
//! and the helper that faults in the segments they will go into.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use strata_store::Store;

use super::{thread_cpu, Found};
use crate::backend::{read_exact_at, PosFile, DIRECT_ALIGN};

/// Reader threads, so that several reads are in flight (a buffered read
/// has the kernel's read-ahead for that; one `O_DIRECT` read at a time
/// leaves the disk idle between them).
pub(super) const READERS: usize = 16;
/// How many records each reader may have read ahead of the loading thread.
pub(super) const READ_AHEAD: usize = 2;

/// A buffer for reads around the page cache: a record and the aligned
/// blocks around it ([`DIRECT_ALIGN`]).
#[derive(Default)]
pub(super) struct Aligned {
    data: Vec<u8>,
    /// `data[start..]` is aligned.
    start: usize,
    /// Where the record begins after `start`, and its length.
    skip: usize,
    len: usize,
}

impl Aligned {
    /// Reads the `len` bytes at `at`, with the aligned blocks around them;
    /// false if the file ends first.
    pub(super) fn read(&mut self, f: &dyn PosFile, at: u64, len: usize) -> std::io::Result<bool> {
        const A: u64 = DIRECT_ALIGN as u64;
        let from = at / A * A;
        let span = ((at + len as u64).next_multiple_of(A) - from) as usize;
        if self.data.len() < span + DIRECT_ALIGN {
            self.data = vec![0; span + DIRECT_ALIGN];
            self.start = self.data.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        }
        (self.skip, self.len) = ((at - from) as usize, 0);
        let buf = &mut self.data[self.start..self.start + span];
        // The last block may lie past the end of the file: the read stops
        // there, short, and only the record's own bytes must be in.
        let need = (at - from) as usize + len;
        let mut got = 0;
        while got < need {
            match f.read_at(&mut buf[got..], from + got as u64) {
                Ok(0) => return Ok(false),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // The failed block may be one the record only shares with
                // its neighbour: its own bytes alone are read again.
                Err(_) => {
                    let own = &mut buf[self.skip..self.skip + len];
                    if !read_exact_at(f, own, at)? {
                        return Ok(false);
                    }
                    break;
                }
            }
        }
        self.len = len;
        Ok(true)
    }

    /// The record's bytes, as last read.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.data[self.start + self.skip..][..self.len]
    }
}

/// A reader's channels: where it sends a record read (its buffer, the
/// read's result, whether its CRC held) and where its buffers come back.
pub(super) type Full = (Aligned, std::io::Result<bool>, bool);

/// `n` readers' channels, each with [`READ_AHEAD`] buffers to fill: the
/// loading thread's ends (full records in, buffers back out) and the
/// readers' ends.
#[allow(clippy::type_complexity)]
pub(super) fn reader_channels(
    n: usize,
) -> (
    Vec<std::sync::mpsc::Receiver<Full>>,
    Vec<std::sync::mpsc::Sender<Aligned>>,
    Vec<(std::sync::mpsc::SyncSender<Full>, std::sync::mpsc::Receiver<Aligned>)>,
) {
    let (mut full_rx, mut free_tx, mut readers) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (full, full_r) = std::sync::mpsc::sync_channel::<Full>(READ_AHEAD);
        let (free, free_r) = std::sync::mpsc::channel::<Aligned>();
        for _ in 0..READ_AHEAD {
            let _ = free.send(Aligned::default());
        }
        full_rx.push(full_r);
        free_tx.push(free);
        readers.push((full, free_r));
    }
    (full_rx, free_tx, readers)
}

/// A reader thread: reads its records whole into the buffers it is given
/// back, checks each one's CRC, and sends it on; stops when the loading
/// thread hangs up. Returns the time its CRCs took.
pub(super) fn read_records<'a>(
    bulk: &dyn PosFile,
    records: impl Iterator<Item = &'a &'a Found>,
    full: &std::sync::mpsc::SyncSender<Full>,
    free: &std::sync::mpsc::Receiver<Aligned>,
) -> Duration {
    let mut crc_t = Duration::ZERO;
    for r in records {
        let Ok(mut buf) = free.recv() else { break };
        let read = buf.read(bulk, r.at, r.len as usize);
        let t = Instant::now();
        let crc_ok = matches!(read, Ok(true)) && crc32c::crc32c(buf.bytes()) == r.crc;
        crc_t += t.elapsed();
        if full.send((buf, read, crc_ok)).is_err() {
            break;
        }
    }
    crc_t
}

/// The helper thread: faults in the segments the records will go into,
/// until `stop`. Returns the time it spent and its CPU time.
pub(super) fn prefault(store: &Store, ahead: &[u32], stop: &AtomicBool) -> (Duration, Duration) {
    let (mut fault, cpu) = (Duration::ZERO, thread_cpu());
    for &seg in ahead {
        if stop.load(Relaxed) {
            break;
        }
        let t = Instant::now();
        store.prefault(seg);
        fault += t.elapsed();
    }
    (fault, thread_cpu().saturating_sub(cpu))
}
