//! The test hooks' hidden flags: `--enable-debug-clock` (the commands
//! `debug_advance_clock` and `debug_panic`) and `--debug-flash-writes`,
//! `--debug-flash-read-delay`, `--debug-flash-async` (the flash tier's
//! test settings), `--debug-reclaim-delay` (a reclaimer that falls behind). This module exists only with the `test-hooks` feature,
//! in the binary the test suites run (`make test-bin`:
//! target/release/strata-test); a production build has neither the flags
//! (clap calls them unknown) nor what they turn on (docs/design.md, "Test
//! hooks").

use strata_store::FlashTier;

/// Flags for the test suites, hidden from `--help`.
#[derive(Debug, clap::Args)]
pub struct TestHooks {
    /// Enable the test-only commands debug_advance_clock and debug_panic
    #[arg(long = "enable-debug-clock", hide = true)]
    pub enable_debug_clock: bool,

    /// With -o ext_path: every item written goes to flash at once, so that
    /// reads come from flash (for running test suites over the flash tier)
    #[arg(long = "debug-flash-writes", hide = true)]
    debug_flash_writes: bool,
    /// With -o ext_path: every read from flash by the I/O threads waits
    /// this many milliseconds first (tests hold reads in flight with it)
    #[arg(long = "debug-flash-read-delay", hide = true, value_name = "MS")]
    debug_flash_read_delay: Option<u64>,
    /// With -o ext_path: every read from flash goes to the I/O threads, as
    /// if no record were in the page cache (implied by the read delay)
    #[arg(long = "debug-flash-async", hide = true)]
    debug_flash_async: bool,
    /// The background reclaimer sleeps this many milliseconds before each
    /// round, so that writers find memory short (tests of their waits)
    #[arg(long = "debug-reclaim-delay", hide = true, value_name = "MS")]
    debug_reclaim_delay: Option<u64>,
}

impl TestHooks {
    /// The reclaimer's delay before each round (none unless asked).
    pub fn reclaim_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.debug_reclaim_delay.unwrap_or(0).min(60_000))
    }

    /// The flash tier's configuration with the flash flags applied; each
    /// needs a flash tier (`-o ext_path`).
    pub fn flash(&self, mut flash: Option<FlashTier>) -> Result<Option<FlashTier>, String> {
        match (&mut flash, self.debug_flash_writes) {
            (Some(t), every) => t.every_write = every,
            (None, true) => return Err("--debug-flash-writes needs -o ext_path".into()),
            (None, false) => {}
        }
        match (&mut flash, self.debug_flash_read_delay) {
            (Some(t), Some(ms)) => {
                t.read_delay = std::time::Duration::from_millis(ms.min(60_000));
                t.read_cached_inline = false;
            }
            (None, Some(_)) => return Err("--debug-flash-read-delay needs -o ext_path".into()),
            _ => {}
        }
        match (&mut flash, self.debug_flash_async) {
            (Some(t), true) => t.read_cached_inline = false,
            (None, true) => return Err("--debug-flash-async needs -o ext_path".into()),
            _ => {}
        }
        Ok(flash)
    }
}
