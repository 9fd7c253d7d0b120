//! The epoch lease: a promise on disk that the running server has not
//! handed out any segment epoch at or above a bound.
//!
//! A CAS value is derived from its segment's epoch, so a restarted store
//! must start its epochs above every epoch the previous process used, or a
//! CAS issued after the restart could equal one a client still holds. The
//! snapshot records the epoch when it was taken, but after `kill -9` the
//! process may have gone on long after its last snapshot. So while it runs,
//! the server keeps this file ahead of its epoch counter by at least half
//! of [`LEASE_SPAN`] (it is rewritten once per half span: a segment opened
//! per megabyte written makes that about once per 512 GiB of writes), and
//! a restart starts above the lease. Like a sequence cache in a database.
//!
//! ```text
//!  0  bound: no epoch at or above it was handed out   u64
//!  8  CRC32C of bytes 0..8                            u32
//! 12  (zero)                                          u32
//! ```

use std::path::{Path, PathBuf};

use crate::backend::{read_exact_at, write_all, Backend};
use crate::SnapshotError;

/// Appended to the snapshot file's name for the lease's.
pub const LEASE_SUFFIX: &str = ".epoch";
/// How far ahead of the epoch counter a lease is granted.
pub const LEASE_SPAN: u64 = 1 << 20;

/// The lease this process holds.
#[derive(Debug)]
pub struct EpochLease {
    path: PathBuf,
    granted: u64,
}

impl EpochLease {
    /// The bound a previous process left beside the snapshot `file`, if
    /// its lease is readable and whole.
    pub fn read(backend: &dyn Backend, file: &Path) -> Option<u64> {
        let f = backend.open(&crate::with_suffix(file, LEASE_SUFFIX)).ok()?;
        let mut b = [0u8; 16];
        if !read_exact_at(&*f, &mut b, 0).ok()? {
            return None;
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[..8]);
        let crc = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        (crc == crc32c::crc32c(&b[..8])).then(|| u64::from_le_bytes(v))
    }

    /// The lease kept beside the snapshot `file`.
    pub fn new(file: &Path) -> EpochLease {
        EpochLease { path: crate::with_suffix(file, LEASE_SUFFIX), granted: 0 }
    }

    /// The bound granted so far.
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// Extends the lease if `epoch` came within half a span of it. True if
    /// the file was rewritten.
    pub fn keep_ahead(&mut self, backend: &dyn Backend, epoch: u64) -> Result<bool, SnapshotError> {
        if epoch.saturating_add(LEASE_SPAN / 2) < self.granted {
            return Ok(false);
        }
        let bound = epoch.saturating_add(LEASE_SPAN);
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&bound.to_le_bytes());
        let crc = crc32c::crc32c(&b[..8]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        let path = &self.path;
        let tmp = crate::with_suffix(path, crate::TMP_SUFFIX);
        let dir = crate::dir_of(path);
        let mut f = backend.create(&tmp).map_err(|e| SnapshotError::io("create", &tmp, e))?;
        write_all(&mut *f, &b).map_err(|e| SnapshotError::io("write", &tmp, e))?;
        f.sync().map_err(|e| SnapshotError::io("fsync", &tmp, e))?;
        drop(f);
        backend.rename(&tmp, path).map_err(|e| SnapshotError::io("rename", &tmp, e))?;
        backend.sync_dir(&dir).map_err(|e| SnapshotError::io("fsync directory", &dir, e))?;
        self.granted = bound;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OsBackend;
    use strata_io::sim::{FaultBackend, Faults};

    #[test]
    fn a_lease_that_cannot_be_written_is_not_granted_and_damage_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("strata.snapshot");
        let b = FaultBackend::new(OsBackend);
        let mut lease = EpochLease::new(&file);
        assert_eq!(lease.keep_ahead(&b, 10).ok(), Some(true));
        assert_eq!((lease.granted(), EpochLease::read(&b, &file)), (10 + LEASE_SPAN, Some(10 + LEASE_SPAN)));
        assert_eq!(lease.keep_ahead(&b, 20).ok(), Some(false), "far enough ahead: nothing written");
        // Failed writes leave the file and the grant as they were.
        for faults in [
            Faults { fail_sync: true, ..Faults::default() },
            Faults { fail_write_at: Some((3, libc::ENOSPC)), ..Faults::default() },
            Faults { fail_rename: true, ..Faults::default() },
        ] {
            b.set(faults);
            assert!(lease.keep_ahead(&b, LEASE_SPAN).is_err());
            assert_eq!(lease.granted(), 10 + LEASE_SPAN);
            b.set(Faults::default());
            assert_eq!(EpochLease::read(&b, &file), Some(10 + LEASE_SPAN));
        }
        // A flipped byte or a short file reads as no lease.
        b.set(Faults { flip_at: vec![2], ..Faults::default() });
        assert_eq!(EpochLease::read(&b, &file), None);
        b.set(Faults::default());
        std::fs::write(crate::with_suffix(&file, LEASE_SUFFIX), [1, 2, 3]).unwrap();
        assert_eq!(EpochLease::read(&b, &file), None);
    }
}
