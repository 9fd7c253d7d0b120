//! `strata-persist`'s integration tests, one module per area, in one test
//! binary: each binary is linked with the release profile's fat LTO, about
//! 25 s of one core apiece, so five binaries cost `make test` a minute more
//! than one.
//!
//! - `crash_sim`: the crash simulator (seeded schedules with the machine
//!   stopped at every I/O operation, checked against a model);
//! - `flash`: the flash tier across restarts;
//! - `point_in_time`: a snapshot is a point in time, a load keeps what was
//!   live, with writer threads running;
//! - `snapshot`: snapshots end to end, with injected faults and damage;
//! - `wal`: the durability log.
//!
//! `cargo test --release -p strata-persist --test integration crash_sim::`
//! runs one of them.

mod crash_sim;
mod flash;
mod point_in_time;
mod snapshot;
mod wal;
