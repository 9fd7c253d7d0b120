//! Executes parsed text requests against the store and writes memcached's
//! replies. Stats counters are bumped here, where the outcome is known.

use std::sync::atomic::Ordering::Relaxed;

use strata_protocol::reply::{self, text as r};
use strata_protocol::text::{retrieval::Key, Command, Config as ParseConfig, Request, StoreOp};
use strata_store::{ArithOutcome, SetOp, StoreError, StoreOutcome, Worker};

use crate::stats::{self, WorkerStats};
use crate::{ConnInfo, Shared};

/// The worker-thread context a request runs in.
pub(crate) struct Ctx<'a> {
    pub shared: &'a Shared,
    pub store: &'a mut Worker,
    pub stats: &'a WorkerStats,
}

impl Ctx<'_> {
    pub fn parse_config(&self) -> ParseConfig {
        let cfg = &self.shared.cfg;
        ParseConfig {
            item_size_max: cfg.item_size_max,
            item_overhead: strata_store::Store::ITEM_OVERHEAD,
            max_get_line: cfg.max_get_line,
            debug_clock: cfg.debug_clock,
        }
    }

    pub fn count_traffic(&self, read: u64, written: u64) {
        let s = self.stats;
        s.bytes_read.store(s.bytes_read.load(Relaxed) + read, Relaxed);
        s.bytes_written.store(s.bytes_written.load(Relaxed) + written, Relaxed);
    }

    pub fn touch_conn(&self, info: &ConnInfo, state: u32) {
        info.last_cmd.store(self.shared.store.clock().now(), Relaxed);
        info.state.store(state, Relaxed);
    }
}

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Continue,
    /// A multi-get stopped at this key position for back-pressure; the
    /// request stays in the buffer and resumes there.
    Resume(usize),
    /// Discard this many bytes of input (data of a refused value).
    Swallow(usize),
    CloseAfterWrite,
}

fn inc(c: &std::sync::atomic::AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

fn to_set_op(op: StoreOp) -> SetOp {
    match op {
        StoreOp::Set => SetOp::Set,
        StoreOp::Add => SetOp::Add,
        StoreOp::Replace => SetOp::Replace,
        StoreOp::Append => SetOp::Append,
        StoreOp::Prepend => SetOp::Prepend,
        StoreOp::Cas(c) => SetOp::Cas(c),
    }
}

/// Runs one request, appending its reply (if any) to `out`.
pub(crate) fn execute(ctx: &mut Ctx<'_>, req: Request<'_>, out: &mut Vec<u8>, resume: Option<usize>) -> Outcome {
    let noreply = req.noreply;
    let s = ctx.stats;
    let shared = ctx.shared;
    let clock = shared.store.clock();
    let reply = |out: &mut Vec<u8>, bytes: &[u8]| {
        if !noreply {
            out.extend_from_slice(bytes);
        }
    };
    match req.command {
        Command::Get { keys, cas, touch } => {
            let expiry = touch.map(|t| clock.expiry(i64::from(t)));
            let mut pos = resume.unwrap_or(0);
            let start = out.len();
            let max_output = ctx.shared.cfg.max_output;
            loop {
                if out.len() >= max_output && pos > 0 {
                    return Outcome::Resume(pos);
                }
                match keys.next_from(pos) {
                    None => {
                        out.extend_from_slice(r::END);
                        break;
                    }
                    Some((Key::TooLong, _)) => {
                        // memcached drops the values it had gathered for this
                        // command and sends only the error.
                        out.truncate(start);
                        out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                        break;
                    }
                    Some((Key::Ok(key), next)) => {
                        pos = next;
                        let hit = match expiry {
                            Some(e) => {
                                // Reply with the item as found, then apply the
                                // new expiry (gat -1 returns it one last time).
                                inc(&s.cmd_touch);
                                let hit = ctx.store.get(key, |it| write_value(out, it, cas)).is_some();
                                if hit {
                                    // Out of memory for a rewrite leaves the old expiry.
                                    let _ = ctx.store.touch(key, e);
                                }
                                hit
                            }
                            None => {
                                inc(&s.cmd_get);
                                ctx.store.get(key, |it| write_value(out, it, cas)).is_some()
                            }
                        };
                        match (expiry.is_some(), hit) {
                            (true, true) => inc(&s.touch_hits),
                            (true, false) => inc(&s.touch_misses),
                            (false, true) => inc(&s.get_hits),
                            (false, false) => inc(&s.get_misses),
                        }
                    }
                }
            }
        }
        Command::Store { op, key, flags, exptime, data } => {
            inc(&s.cmd_set);
            let expiry = clock.expiry(i64::from(exptime));
            match ctx.store.set(to_set_op(op), key, flags, expiry, data) {
                Ok(StoreOutcome::Stored) => {
                    if matches!(op, StoreOp::Cas(_)) {
                        inc(&s.cas_hits);
                    }
                    reply(out, r::STORED)
                }
                Ok(StoreOutcome::NotStored) => reply(out, r::NOT_STORED),
                Ok(StoreOutcome::Exists) => {
                    inc(&s.cas_badval);
                    reply(out, r::EXISTS)
                }
                Ok(StoreOutcome::NotFound) => {
                    inc(&s.cas_misses);
                    reply(out, r::NOT_FOUND)
                }
                Err(StoreError::TooLarge) => {
                    inc(&s.store_too_large);
                    reply(out, r::TOO_LARGE)
                }
                Err(_) => {
                    inc(&s.store_no_memory);
                    reply(out, r::OUT_OF_MEMORY_STORING);
                }
            }
        }
        Command::TooLarge { op, key, swallow } => {
            inc(&s.store_too_large);
            // memcached unlinks the old value of a failed set so a stale
            // version cannot outlive the write that was meant to replace it.
            if op == StoreOp::Set {
                ctx.store.delete(key);
            }
            reply(out, r::TOO_LARGE);
            return Outcome::Swallow(swallow);
        }
        Command::Delete { key } => {
            if ctx.store.delete(key) {
                inc(&s.delete_hits);
                reply(out, r::DELETED)
            } else {
                inc(&s.delete_misses);
                reply(out, r::NOT_FOUND)
            }
        }
        Command::Arith { key, incr, delta } => {
            let (hits, misses) = if incr { (&s.incr_hits, &s.incr_misses) } else { (&s.decr_hits, &s.decr_misses) };
            match ctx.store.arith(key, incr, delta) {
                Ok(ArithOutcome::Value(v)) => {
                    inc(hits);
                    if !noreply {
                        reply::number(out, v);
                    }
                }
                Ok(ArithOutcome::NotFound) => {
                    inc(misses);
                    reply(out, r::NOT_FOUND)
                }
                Ok(ArithOutcome::NonNumeric) => reply(out, r::NON_NUMERIC),
                Err(_) => reply(out, r::OUT_OF_MEMORY),
            }
        }
        Command::Touch { key, exptime } => {
            inc(&s.cmd_touch);
            match ctx.store.touch(key, clock.expiry(i64::from(exptime))) {
                Ok(true) => {
                    inc(&s.touch_hits);
                    reply(out, r::TOUCHED)
                }
                Ok(false) => {
                    inc(&s.touch_misses);
                    reply(out, r::NOT_FOUND)
                }
                Err(_) => reply(out, r::OUT_OF_MEMORY),
            }
        }
        Command::FlushAll { delay } => {
            inc(&s.cmd_flush);
            if !ctx.shared.cfg.flush_enabled {
                reply(out, r::FLUSH_DISABLED);
            } else {
                let at = (delay > 0).then(|| clock.expiry(i64::from(delay)));
                ctx.shared.store.flush_all(at);
                reply(out, r::OK);
            }
        }
        Command::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(stats::VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Command::Verbosity { level } => {
            ctx.shared.verbosity.store(level.min(2), Relaxed);
            reply(out, r::OK);
        }
        Command::CacheMemlimit { megabytes } => {
            let msg: &[u8] = if megabytes < 8 {
                b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
            } else if megabytes > 1_000_000_000 {
                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
            } else if ctx.shared.store.set_memory_limit(megabytes as usize * (1 << 20)).is_ok() {
                r::OK
            } else {
                b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
            };
            reply(out, msg);
        }
        Command::Quit => return Outcome::CloseAfterWrite,
        Command::Shutdown { mode } => {
            if !ctx.shared.cfg.shutdown_enabled {
                out.extend_from_slice(r::SHUTDOWN_DISABLED);
            } else if mode.is_none() || mode == Some(b"graceful") {
                tracing::info!("shutdown requested by a client");
                ctx.shared.shutdown.store(true, Relaxed);
                let _ = ctx.shared.acceptor.wake();
                return Outcome::CloseAfterWrite;
            } else {
                out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
            }
        }
        Command::Stats { args } => stats::command(ctx.shared, args, out),
        Command::DebugAdvanceClock { seconds } => {
            clock.advance(seconds);
            out.extend_from_slice(r::OK);
        }
        Command::Error(e) => reply(out, e.reply()),
    }
    Outcome::Continue
}

fn write_value(out: &mut Vec<u8>, it: strata_store::ItemView<'_>, cas: bool) {
    reply::value(out, it.key, it.flags, it.value, cas.then_some(it.cas));
}
