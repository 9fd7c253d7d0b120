//! Server time in whole seconds, and memcached's expiry rules.
//!
//! Like memcached, time is kept relative to process start (`rel_time_t`) so an
//! item's expiry fits in 4 bytes. The clock is read on every request, so it is
//! a single atomic load; a ticker (the server's timer thread) refreshes it.
//! Tests drive it by hand with [`Clock::manual`] and [`Clock::advance`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// memcached's `REALTIME_MAXDELTA`: expiry times up to 30 days are relative.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// Relative time at start. memcached starts slightly above zero so that the
/// "already expired" marker (1) is always in the past.
const START: u32 = 2;

/// Seconds since (just before) process start, shared by all threads.
#[derive(Debug)]
pub struct Clock {
    started: Option<Instant>,
    /// Relative time at `started` ([`START`], or where a restored
    /// snapshot's timeline stood).
    base: u32,
    /// Unix time corresponding to relative time 0.
    process_started: i64,
    ticks: AtomicU32,
    /// Seconds added by [`Clock::advance`] (tests, `debug_advance_clock`).
    offset: AtomicU32,
}

impl Clock {
    /// A clock following real time; call [`Clock::tick`] regularly.
    pub fn system() -> Clock {
        let unix = Clock::unix_wall();
        Clock {
            started: Some(Instant::now()),
            base: START,
            process_started: unix - i64::from(START),
            ticks: AtomicU32::new(START),
            offset: AtomicU32::new(0),
        }
    }

    /// A clock following real time that continues a previous process's
    /// timeline (a warm restart): relative time 0 stays the unix time
    /// `process_started`, so the expiry times, write times and flush time
    /// a snapshot holds mean what they meant, with nothing rewritten
    /// (memcached's warm restart keeps its `process_started` the same
    /// way). `saved_now` is where that timeline stood when the snapshot
    /// was taken: if the wall clock has gone back since, time resumes from
    /// there instead of running backwards, even to before the timeline's
    /// start (a clock stepped back soon after a start: refusing the
    /// snapshot then lost it, found by the crash simulator). `None` if the
    /// timeline would not fit in 32 bits of seconds (a start more than
    /// [`REALTIME_MAXDELTA`] ahead of the wall clock, or more than a
    /// century ago); the caller then starts a fresh clock.
    pub fn resumed(process_started: i64, saved_now: u32) -> Option<Clock> {
        Clock::resume_at(Clock::unix_wall(), process_started, saved_now, true)
    }

    /// [`Clock::resumed`] at a given wall time; a manual clock unless `real`.
    pub fn resume_at(unix_now: i64, process_started: i64, saved_now: u32, real: bool) -> Option<Clock> {
        let rel = unix_now.checked_sub(process_started)?;
        if rel < -REALTIME_MAXDELTA {
            return None;
        }
        let rel = u32::try_from(rel.max(0)).ok()?;
        let base = rel.max(saved_now).max(START);
        (base < u32::MAX / 2).then(|| Clock {
            started: real.then(Instant::now),
            base,
            process_started,
            ticks: AtomicU32::new(base),
            offset: AtomicU32::new(0),
        })
    }

    fn unix_wall() -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
    }

    /// The unix time of relative time 0 (what a snapshot records so that a
    /// restart can continue this timeline).
    pub fn process_started(&self) -> i64 {
        self.process_started
    }

    /// A clock that moves only when told to; starts at `unix_now`.
    pub fn manual(unix_now: i64) -> Clock {
        Clock {
            started: None,
            base: START,
            process_started: unix_now - i64::from(START),
            ticks: AtomicU32::new(START),
            offset: AtomicU32::new(0),
        }
    }

    /// Refreshes the cached time from the monotonic clock.
    pub fn tick(&self) {
        if let Some(started) = self.started {
            let secs = u32::try_from(started.elapsed().as_secs()).unwrap_or(u32::MAX);
            self.ticks.store(self.base.saturating_add(secs), Ordering::Relaxed);
        }
    }

    /// Moves the clock forward by `secs` seconds.
    pub fn advance(&self, secs: u32) {
        self.offset.fetch_add(secs, Ordering::Relaxed);
    }

    /// Moves the clock forward to `t` if it stands before it: a recovery
    /// whose log shows changes made at `t` (the wall clock may have gone
    /// back since, or run behind the old process's monotonic clock), so
    /// that no expiry computed then grows and nothing seen expired then
    /// lives again.
    pub fn catch_up(&self, t: u32) {
        let now = self.now();
        if t > now {
            self.advance(t - now);
        }
    }

    /// Current relative time in seconds.
    #[inline]
    pub fn now(&self) -> u32 {
        self.ticks.load(Ordering::Relaxed).saturating_add(self.offset.load(Ordering::Relaxed))
    }

    /// Current unix time as the server sees it.
    pub fn unix_now(&self) -> i64 {
        self.unix_time(self.now())
    }

    /// The unix time of relative time `t` (an expiry, a write time).
    pub fn unix_time(&self, t: u32) -> i64 {
        self.process_started + i64::from(t)
    }

    /// memcached's `realtime()`: a client exptime to relative expiry time.
    /// 0 is never; negative is already expired; up to 30 days is relative to
    /// now; larger is a unix timestamp (already expired if in the past).
    pub fn expiry(&self, exptime: i64) -> u32 {
        if exptime == 0 {
            return 0;
        }
        if exptime < 0 {
            return 1;
        }
        if exptime > REALTIME_MAXDELTA {
            if exptime <= self.process_started {
                return 1;
            }
            return u32::try_from(exptime - self.process_started).unwrap_or(u32::MAX);
        }
        self.now().saturating_add(exptime as u32)
    }

    /// Whether an item with relative expiry `expiry` is dead at `now`.
    #[inline]
    pub fn is_expired(expiry: u32, now: u32) -> bool {
        expiry != 0 && expiry <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_expiry_rules() {
        let c = Clock::manual(1_700_000_000);
        let now = c.now();
        assert_eq!(c.expiry(0), 0);
        assert!(Clock::is_expired(c.expiry(-1), now));
        assert_eq!(c.expiry(10), now + 10);
        assert_eq!(c.expiry(REALTIME_MAXDELTA), now + REALTIME_MAXDELTA as u32);
        // Just past 30 days it is a unix time, long gone.
        assert!(Clock::is_expired(c.expiry(REALTIME_MAXDELTA + 1), now));
        assert_eq!(c.expiry(1_700_000_100), now + 100);
        c.advance(100);
        assert!(Clock::is_expired(now + 100, c.now()));
        assert!(!Clock::is_expired(now + 101, c.now()));
    }

    #[test]
    fn a_resumed_clock_continues_the_old_timeline() {
        let old = Clock::manual(1_700_000_000);
        old.advance(500);
        let expiry = old.expiry(60);
        // Restarted 30 s after the snapshot: 30 of the item's 60 s are left.
        let new = Clock::resume_at(old.unix_now() + 30, old.process_started(), old.now(), false)
            .unwrap_or_else(|| panic!("fits"));
        assert_eq!(new.now(), old.now() + 30);
        assert_eq!(new.unix_time(expiry), old.unix_time(expiry));
        assert_eq!(new.expiry(1_700_000_000 + 1000), old.expiry(1_700_000_000 + 1000));
        // The wall clock went back 100 s: time resumes where it stood.
        let back = Clock::resume_at(old.unix_now() - 100, old.process_started(), old.now(), false)
            .unwrap_or_else(|| panic!("fits"));
        assert_eq!(back.now(), old.now());
        // The wall clock stepped back to before the timeline began: time
        // resumes where it stood all the same.
        let early = Clock::resume_at(old.process_started() - 5, old.process_started(), old.now(), false)
            .unwrap_or_else(|| panic!("fits"));
        assert_eq!((early.now(), early.process_started()), (old.now(), old.process_started()));
        // A start more than 30 days ahead, or a timeline beyond 32 bits, is
        // refused.
        assert!(Clock::resume_at(1_000, 1_000 + REALTIME_MAXDELTA + 1, 0, false).is_none());
        assert!(Clock::resume_at(1 << 40, 0, 0, false).is_none());
    }

    #[test]
    fn catching_up_only_moves_forward() {
        let c = Clock::manual(1_700_000_000);
        c.catch_up(500);
        assert_eq!(c.now(), 500);
        c.catch_up(400);
        assert_eq!(c.now(), 500);
    }
}
