//! The flash tier's storage: values beyond RAM, on files or block devices.
//!
//! Owns the bytes on flash and nothing else: [`Device`] (positional I/O
//! behind a trait, with [`FaultDevice`] for tests), [`record`] (one item,
//! checksummed), and [`Flash`] (the log of regions, written in ring order,
//! reclaimed oldest first). It knows nothing of protocols, keys or the
//! index: the store decides what goes to flash and keeps the index slots
//! that point at it (`../shared/DESIGN.md` §6).

pub mod device;
mod log;
pub mod record;

pub use device::{Device, FaultDevice, Faults, FileDevice};
pub use log::{Checkpoint, Config, Flash, FlashError, ReadError, Reserve, Stats, Writer, ADDR_BITS};
pub use record::{Record, RecordError};
