//! Tests of the load's reading: records read in parallel, failed reads.

use super::*;
use crate::backend::{OsBackend, DIRECT_ALIGN};
use strata_io::sim::{FaultBackend, Faults, SimFs};

fn file_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 % 253) as u8).collect()
}

#[test]
fn records_at_unaligned_offsets_read_whole_through_every_backend() {
    let want = file_bytes(5 * DIRECT_ALIGN + 77);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, &want).unwrap();
    let sim = SimFs::new();
    crate::backend::write_all(&mut *sim.create(&path).unwrap(), &want).unwrap();
    let faulty = FaultBackend::new(OsBackend);
    faulty.set(Faults { short_reads: Some(1000), ..Faults::default() });
    let backends: [&dyn Backend; 3] = [&OsBackend, &sim, &faulty];
    let mut buf = Aligned::default();
    for b in backends {
        let f = b.open_bulk(&path).unwrap();
        // Records starting and ending mid-block, on a block, across
        // several, and running to the file's last (partial) block.
        for (at, len) in
            [(17, 100), (DIRECT_ALIGN as u64, DIRECT_ALIGN), (4000, 3 * DIRECT_ALIGN + 5), (20, want.len() - 20)]
        {
            assert!(buf.read(&*f, at, len).unwrap(), "{b:?} {at} {len}");
            assert_eq!(buf.bytes(), &want[at as usize..at as usize + len], "{b:?} {at} {len}");
        }
        // A record the file ends in the middle of.
        assert!(!buf.read(&*f, 100, want.len()).unwrap());
    }
}

#[test]
fn a_failed_read_in_a_record_is_an_error_for_it_alone() {
    let want = file_bytes(4 * DIRECT_ALIGN);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, &want).unwrap();
    let b = FaultBackend::new(OsBackend);
    b.set(Faults { fail_read_within: Some(5000..5001), ..Faults::default() });
    let f = b.open_bulk(&path).unwrap();
    let mut buf = Aligned::default();
    assert!(buf.read(&*f, 4990, 100).is_err());
    // The records either side still read, though they share its block.
    assert!(buf.read(&*f, 4500, 500).unwrap());
    assert_eq!(buf.bytes(), &want[4500..5000]);
    assert!(buf.read(&*f, 5001, 3000).unwrap());
    assert_eq!(buf.bytes(), &want[5001..8001]);
}
