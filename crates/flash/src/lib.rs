//! The flash tier's storage: values beyond RAM, on files or block devices.
//!
//! Owns the bytes on flash and nothing else: [`record`] (one item,
//! checksummed), and [`Flash`] (the log of regions, written in ring order,
//! reclaimed oldest first, synced for a snapshot). Its files are
//! `strata_io::Device`s, opened through a `strata_io::Backend` (the OS's,
//! or in tests one that injects faults or loses power). It knows nothing
//! of protocols, keys or the index: the store decides what goes to flash
//! and keeps the index slots that point at it (`../shared/DESIGN.md` §6).

mod log;
pub mod record;

pub use log::{Checkpoint, Config, Flash, FlashError, ReadError, Reserve, Stats, Writer, ADDR_BITS};
pub use record::{Record, RecordError};
