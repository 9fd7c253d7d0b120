//! Executes parsed text requests: the classic commands' replies are written
//! here, the meta commands' in [`crate::execution::meta`]; both run through the
//! semantic core in [`crate::execution::core`]. Admin commands (flush_all, stats,
//! version...) are handled here directly.

use std::sync::atomic::Ordering::Relaxed;

use strata_protocol::ops;
use strata_protocol::reply::{self, text as r};
use strata_protocol::text::auth::AuthParse;
use strata_protocol::text::{retrieval::Key, Command, Request};
use strata_store::{ArithOutcome, Counted, DeleteOutcome, Flow, StoreError, StoreOutcome};

use crate::execution::ctx::auth_failed;
use crate::execution::ctx::ready;
pub(crate) use crate::execution::ctx::{Ctx, Outcome};
use crate::execution::{changes, meta};
use crate::observability::inc;
use crate::observability::stats;
use crate::CloseReason;

/// A meta executor's [`Flow`] as the connection's next step.
fn after(flow: Flow<()>) -> Outcome {
    match flow {
        Flow::Ready(()) => Outcome::Continue,
        Flow::Wait(t) => Outcome::wait(t),
    }
}

/// Where a classic reply goes: to the client, or under `noreply` only to
/// the `-vv` log (memcached's shows the reply the client did not get).
#[derive(Clone, Copy)]
struct Say<'a> {
    noreply: bool,
    fd: i32,
    shared: &'a crate::Shared,
}

impl Say<'_> {
    fn reply(&self, out: &mut Vec<u8>, bytes: &[u8]) {
        if !self.noreply {
            out.extend_from_slice(bytes);
        } else if crate::observability::verbose::on(self.shared) {
            crate::observability::verbose::noreply(self.fd, bytes);
        }
    }
}

/// Runs one request, appending its reply (if any) to `out`.
pub(crate) fn execute(ctx: &mut Ctx<'_>, req: Request<'_>, out: &mut Vec<u8>, resume: Option<usize>) -> Outcome {
    let say = Say { noreply: req.noreply, fd: ctx.fd, shared: ctx.shared };
    if changes::text(&req.command) && ctx.shared.store.journal_failed() {
        // Refused before it runs, with the reply a change the store
        // refuses gets: `noreply` hides it (meta requests have none, and
        // `q` hides no error). A refused value's data is still discarded.
        say.reply(out, r::LOG_FAILED);
        return match req.command {
            Command::TooLarge { swallow, .. } | Command::MetaTooLarge { swallow, .. } => Outcome::Swallow(swallow),
            _ => Outcome::Continue,
        };
    }
    match req.command {
        Command::Get { keys, cas, read } => multi_get(ctx, keys, cas, read, out, resume),
        c @ (Command::Store(_)
        | Command::TooLarge { .. }
        | Command::Delete(_)
        | Command::Arith(_)
        | Command::Touch(_)
        | Command::FlushAll { .. }) => change(ctx, c, say, out),
        Command::MetaGet { get, reply, value } => after(meta::get(ctx, &get, &reply, value, out)),
        Command::MetaSet { set, reply } => after(meta::set(ctx, &set, &reply, out)),
        Command::MetaTooLarge { key, swallow, .. } => {
            meta::too_large(ctx, key.as_bytes(), out);
            Outcome::Swallow(swallow)
        }
        Command::MetaDelete { del, reply } => after(meta::delete(ctx, &del, &reply, out)),
        Command::MetaArith { arith, reply, value } => after(meta::arith(ctx, &arith, &reply, value, out)),
        Command::MetaNoop => {
            out.extend_from_slice(r::MN);
            Outcome::Continue
        }
        Command::MetaDebug { key, .. } => {
            if let Flow::Wait(t) = meta::debug(ctx, &key, out) {
                return Outcome::wait(t);
            }
            inc(&ctx.stats.cmd_meta);
            Outcome::Continue
        }
        Command::Error(e) => {
            say.reply(out, e.reply());
            Outcome::Continue
        }
        Command::Swallow { error, swallow } => {
            out.extend_from_slice(error.reply());
            Outcome::Swallow(swallow)
        }
        c => admin(ctx, c, say, out, resume),
    }
}

/// `get`, `gets`, `gat`, `gats`: a value per key found, then `END`; from
/// key position `resume` when the request runs again.
fn multi_get(
    ctx: &mut Ctx<'_>,
    keys: strata_protocol::text::Keys<'_>,
    cas: bool,
    read: ops::Read,
    out: &mut Vec<u8>,
    resume: Option<usize>,
) -> Outcome {
    let mut pos = resume.unwrap_or(0);
    let start = out.len();
    let max_output = ctx.shared.cfg.max_output;
    loop {
        // Its own reply limit, or the server-wide budget while it
        // is spent: the rest waits until the client reads.
        if pos > 0 && (out.len() >= max_output || ctx.shared.replies.holds_back(out.len())) {
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
                out.extend_from_slice(r::BAD_FORMAT);
                break;
            }
            Some((Key::Ok(key), next)) => {
                // gat replies with the item as found, then the new
                // expiry applies (gat -1 returns it one last time).
                let get = ops::Get { key: ops::Key::Raw(key), read };
                // A failed rewrite for a touch leaves the old expiry;
                // the read itself has no error to report.
                let hit = match ctx.get(&get, |it| write_value(out, it, cas)) {
                    Flow::Ready(hit) => hit,
                    // The keys before it are answered; the request
                    // runs again from this one once its value is
                    // read from flash (the connection parks).
                    Flow::Wait(ticket) => return Outcome::Wait { ticket, at: Some(pos) },
                };
                if let Err(StoreError::NotLogged) = hit {
                    // gat with the durability log down: the touch
                    // cannot be kept, so nothing is answered but that.
                    out.truncate(start);
                    out.extend_from_slice(r::LOG_FAILED);
                    break;
                }
                pos = next;
                ctx.shared.detail.record_get(key, matches!(hit, Ok(Some(()))));
            }
        }
    }
    Outcome::Continue
}

/// The classic commands that change an item (and `flush_all`).
fn change(ctx: &mut Ctx<'_>, command: Command<'_>, say: Say<'_>, out: &mut Vec<u8>) -> Outcome {
    let reply = |out: &mut Vec<u8>, bytes: &[u8]| say.reply(out, bytes);
    let noreply = say.noreply;
    let shared = say.shared;
    let fd = say.fd;
    match command {
        Command::Store(set) => {
            let r = ready!(ctx.set(&set));
            ctx.shared.detail.record_set(set.key.as_bytes());
            match r {
                Ok(stored) => reply(
                    out,
                    match stored.outcome {
                        StoreOutcome::Stored => r::STORED,
                        StoreOutcome::NotStored => r::NOT_STORED,
                        StoreOutcome::Exists => r::EXISTS,
                        StoreOutcome::NotFound => r::NOT_FOUND,
                    },
                ),
                Err(StoreError::TooLarge) => reply(out, r::TOO_LARGE),
                Err(StoreError::NotLogged) => reply(out, r::LOG_FAILED),
                Err(_) => reply(out, r::OUT_OF_MEMORY_STORING),
            }
        }
        Command::TooLarge { mode, cas, key, swallow } => {
            // memcached: only NREAD_SET (not cas) drops the old item.
            ctx.shared.detail.record_set(key);
            ctx.refuse_too_large(
                key,
                crate::execution::core::store_cmd(mode, cas),
                changes::text_too_large_drops(mode, cas),
            );
            reply(out, r::TOO_LARGE);
            return Outcome::Swallow(swallow);
        }
        Command::Delete(del) => {
            let r = ready!(ctx.delete(&del));
            ctx.shared.detail.record_delete(del.key.as_bytes());
            match r {
                Ok(DeleteOutcome::Deleted) => reply(out, r::DELETED),
                Err(StoreError::NotLogged) => reply(out, r::LOG_FAILED),
                _ => reply(out, r::NOT_FOUND),
            }
        }
        Command::Arith(arith) => match ctx.arith(&arith) {
            Flow::Wait(t) => return Outcome::wait(t),
            Flow::Ready(Ok(Counted { outcome: ArithOutcome::Value(v), .. })) => {
                if !noreply {
                    reply::number(out, v);
                } else if crate::observability::verbose::on(shared) {
                    crate::observability::verbose::noreply(fd, v.to_string().as_bytes());
                }
            }
            Flow::Ready(Ok(Counted { outcome: ArithOutcome::NonNumeric, .. })) => reply(out, r::NON_NUMERIC),
            Flow::Ready(Ok(_)) => reply(out, r::NOT_FOUND),
            Flow::Ready(Err(StoreError::NotLogged)) => reply(out, r::LOG_FAILED),
            Flow::Ready(Err(_)) => reply(out, r::OUT_OF_MEMORY),
        },
        Command::Touch(get) => match ctx.get(&get, |_| ()) {
            Flow::Wait(t) => return Outcome::wait(t),
            Flow::Ready(Ok(Some(()))) => reply(out, r::TOUCHED),
            Flow::Ready(Ok(None)) => reply(out, r::NOT_FOUND),
            Flow::Ready(Err(StoreError::NotLogged)) => reply(out, r::LOG_FAILED),
            Flow::Ready(Err(_)) => reply(out, r::OUT_OF_MEMORY),
        },
        Command::FlushAll { delay } => reply(
            out,
            match ctx.flush_all(delay) {
                Ok(true) => r::OK,
                Ok(false) => r::FLUSH_DISABLED,
                Err(_) => r::LOG_FAILED,
            },
        ),
        _ => unreachable_command(out),
    }
    Outcome::Continue
}

/// The admin commands: version, verbosity, memory limit, tuning, dumps,
/// quit and shutdown, certificates, `watch`, `stats`, `snapshot`.
fn admin(ctx: &mut Ctx<'_>, command: Command<'_>, say: Say<'_>, out: &mut Vec<u8>, resume: Option<usize>) -> Outcome {
    let reply = |out: &mut Vec<u8>, bytes: &[u8]| say.reply(out, bytes);
    match command {
        Command::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(stats::VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Command::Verbosity { level } => {
            ctx.shared.verbosity.store(level.min(2), Relaxed);
            if let Some(set) = crate::VERBOSITY_HOOK.get() {
                set(level.min(2));
            }
            reply(out, r::OK);
        }
        Command::CacheMemlimit { megabytes } => {
            let msg: &[u8] = if megabytes < 8 {
                r::MEMLIMIT_TOO_SMALL
            } else if megabytes > 1_000_000_000 {
                r::MEMLIMIT_NOT_BYTES
            } else if ctx.shared.store.set_memory_limit(megabytes as usize * (1 << 20)).is_ok() {
                // memcached's line, at -v and up.
                if ctx.shared.verbosity.load(Relaxed) > 0 {
                    tracing::info!("maxbytes adjusted to {megabytes}m");
                }
                r::OK
            } else {
                r::MEMLIMIT_FAILED
            };
            reply(out, msg);
        }
        Command::Tune(t) => reply(
            out,
            crate::execution::admin::tune(&ctx.shared.store, &ctx.shared.tuning, ctx.shared.cfg.background_reclaim, t),
        ),
        Command::Metadump { .. } if !ctx.shared.tuning.crawler.load(Relaxed) => {
            out.extend_from_slice(r::CRAWLER_DISABLED)
        }
        Command::Metadump { mg, .. } if !ctx.shared.cfg.dump_enabled => {
            // memcached's wording for each.
            out.extend_from_slice(if mg { r::KEY_DUMP_DISABLED } else { r::METADUMP_DISABLED })
        }
        Command::Metadump { mg, .. } if resume.is_none() && ctx.replies_queued => {
            out.extend_from_slice(if mg { r::MGDUMP_PIPELINED } else { r::METADUMP_PIPELINED })
        }
        Command::Metadump { classes, mg } => return metadump(ctx, classes, mg, out, resume),
        Command::Quit => return Outcome::CloseAfterWrite(CloseReason::Normal),
        Command::Shutdown { mode } => {
            if !ctx.shared.cfg.shutdown_enabled {
                out.extend_from_slice(r::SHUTDOWN_DISABLED);
            } else if mode.is_none() || mode == Some(b"graceful") {
                tracing::info!(graceful = mode.is_some(), "shutdown requested by a client");
                if mode.is_some() {
                    ctx.shared.run.drain();
                } else {
                    ctx.shared.run.stop();
                }
                let _ = ctx.shared.acceptor.wake();
                return Outcome::CloseAfterWrite(CloseReason::Shutdown);
            } else {
                out.extend_from_slice(r::BAD_SHUTDOWN_MODE);
            }
        }
        Command::RefreshCerts => match &ctx.shared.tls {
            // memcached's replies, errors included (its text, then ours).
            None => out.extend_from_slice(r::TLS_NOT_ENABLED),
            Some(tls) => match tls.refresh() {
                Ok(()) => reply(out, r::OK),
                Err(e) => {
                    tracing::warn!(error = %e, "refresh_certs failed; the old certificates stay");
                    out.extend_from_slice(format!("Error loading the certificate chain: {e}\r\n").as_bytes());
                }
            },
        },
        Command::Watch { args } => return watch(ctx, args, out),
        Command::Stats { args } if args.iter().next() == Some(b"cachedump") => {
            if ctx.shared.cfg.dump_enabled {
                cachedump(ctx, args, out)
            } else {
                out.extend_from_slice(r::CACHEDUMP_DISABLED)
            }
        }
        Command::Stats { args } => strata_protocol::stats::text(out, &stats::command(ctx.shared, args)),
        Command::Snapshot => out.extend_from_slice(match ctx.shared.snapshots.as_ref().map(|s| s.request()) {
            Some(Ok(())) => r::OK,
            Some(Err(_)) => r::SNAPSHOT_RUNNING,
            None => r::SNAPSHOTS_OFF,
        }),
        #[cfg(feature = "test-hooks")]
        Command::DebugAdvanceClock { seconds } => {
            ctx.shared.store.clock().advance(seconds);
            out.extend_from_slice(r::OK);
        }
        // Test-only (--enable-debug-clock): a stand-in for a bug, so tests
        // can check that a panic closes only its own connection.
        #[cfg(feature = "test-hooks")]
        #[allow(clippy::panic)]
        Command::DebugPanic => panic!("debug_panic: a test asked for a panic"),
        _ => unreachable_command(out),
    }
    Outcome::Continue
}

/// `lru_crawler metadump|mgdump`: a line per item of the classes asked
/// for, index stripe by stripe; from stripe `resume` when it runs again
/// after the client read what was sent.
fn metadump(ctx: &mut Ctx<'_>, classes: u64, mg: bool, out: &mut Vec<u8>, resume: Option<usize>) -> Outcome {
    let clock = ctx.shared.store.clock();
    // A class id is a size band's number, as `stats items` and
    // `stats slabs` report them.
    {
        let (start, stripes) = (resume.unwrap_or(0), ctx.store.stripes());
        for stripe in start..stripes {
            // At least one stripe per turn; then the client reads.
            if stripe > start && out.len() >= ctx.shared.cfg.max_output {
                return Outcome::Resume(stripe);
            }
            ctx.store.scan(stripe, |key, info| {
                let class = info.class;
                if classes & (1 << class) == 0 {
                } else if mg {
                    mgdump_line(out, key, info.binary_key)
                } else {
                    metadump_line(out, key, info, class, clock)
                }
            });
        }
    }
    out.extend_from_slice(if mg { r::EN } else { r::END });
    Outcome::Continue
}

/// `watch [kinds]`: the connection receives event lines from now on.
fn watch(ctx: &mut Ctx<'_>, args: strata_protocol::text::Tokens<'_>, out: &mut Vec<u8>) -> Outcome {
    if !ctx.shared.cfg.watch_enabled {
        out.extend_from_slice(r::WATCH_DISABLED);
        return Outcome::Continue;
    }
    if ctx.replies_queued {
        out.extend_from_slice(r::WATCH_PIPELINED);
        return Outcome::Continue;
    }
    let mut kinds = 0;
    for name in args.iter() {
        match crate::observability::watch::kind(name) {
            Some(k) => kinds |= k,
            None => {
                out.extend_from_slice(r::ERROR);
                return Outcome::Continue;
            }
        }
    }
    // memcached's default: fetchers.
    let kinds = if kinds == 0 { crate::observability::watch::FETCHERS } else { kinds };
    match ctx.shared.watchers.add(kinds) {
        Some(w) => {
            out.extend_from_slice(r::OK);
            return Outcome::Watch(w);
        }
        None => out.extend_from_slice(r::WATCHER_TOO_MANY),
    }
    Outcome::Continue
}

/// A command [`execute`] hands to a helper that does not take it: cannot
/// happen (each helper's caller matches its commands); answered as an
/// unknown command rather than a panic on a network path.
fn unreachable_command(out: &mut Vec<u8>) {
    debug_assert!(false, "a command reached a helper that does not serve it");
    out.extend_from_slice(r::ERROR);
}

/// memcached's output cap for `stats cachedump`.
const CACHEDUMP_MAX: usize = 2 << 20;

/// `stats cachedump <class> <limit>`: `ITEM <key> [<bytes> b; <exptime> s]`
/// lines, at most `limit` of them (0: no limit) and at most 2 MiB, as
/// memcached. strata's one class is 1; it lists in index order where
/// memcached walks its LRU from the most recent.
fn cachedump(ctx: &mut Ctx<'_>, args: strata_protocol::text::Tokens<'_>, out: &mut Vec<u8>) {
    use std::io::Write;
    use strata_protocol::numbers::parse_u32;
    let args: Vec<&[u8]> = args.iter().collect();
    if args.len() < 3 {
        out.extend_from_slice(r::BAD_COMMAND_LINE);
        return;
    }
    let (Some(class), Some(limit)) = (parse_u32(args[1]), parse_u32(args[2])) else {
        out.extend_from_slice(r::BAD_FORMAT);
        return;
    };
    if class >= 64 {
        out.extend_from_slice(r::ILLEGAL_SLAB_ID);
        return;
    }
    {
        let clock = ctx.shared.store.clock();
        let (start, mut listed) = (out.len(), 0u32);
        for stripe in 0..ctx.store.stripes() {
            ctx.store.scan(stripe, |key, info| {
                if (limit != 0 && listed >= limit) || out.len() - start >= CACHEDUMP_MAX {
                    return;
                }
                if info.class != class as usize {
                    return;
                }
                let exp = if info.expiry == 0 { 0 } else { clock.unix_time(info.expiry) };
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(key);
                // Writing into a Vec cannot fail.
                let _ = write!(out, " [{} b; {exp} s]\r\n", info.value_len);
                listed += 1;
            });
            if (limit != 0 && listed >= limit) || out.len() - start >= CACHEDUMP_MAX {
                break;
            }
        }
    }
    out.extend_from_slice(r::END);
}

/// One `lru_crawler metadump` line, memcached's format (ended by `\n`, not
/// `\r\n`); times absolute. `la` is when the item was written: strata does
/// not keep a last-access time per item.
fn metadump_line(
    out: &mut Vec<u8>,
    key: &[u8],
    info: &strata_store::Inspect,
    class: usize,
    clock: &strata_store::Clock,
) {
    use std::io::Write;
    let exp = if info.expiry == 0 { -1 } else { clock.unix_time(info.expiry) };
    let fetch = if info.fetched { "yes" } else { "no" };
    // Writing into a Vec cannot fail.
    let _ = writeln!(
        out,
        "key={} exp={exp} la={} cas={} fetch={fetch} cls={class} size={}",
        crate::observability::uri(key),
        clock.unix_time(info.written),
        info.cas,
        info.size
    );
}

/// One `lru_crawler mgdump` line: an `mg` command that fetches the item,
/// memcached 1.6's format: base64 and ` b` for a key stored through base64
/// (`binary`), as memcached; strata also encodes any other key a text
/// command could not carry (a space or control byte, from the binary
/// protocol), so that every line can be sent back.
fn mgdump_line(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b"mg ");
    if binary || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        strata_protocol::meta::encode_key(key, out);
        out.extend_from_slice(b" b\r\n");
    } else {
        out.extend_from_slice(key);
        out.extend_from_slice(b"\r\n");
    }
}

fn write_value(out: &mut Vec<u8>, it: strata_store::ItemView<'_>, cas: bool) {
    reply::value(out, it.key, it.flags, it.value, cas.then_some(it.cas));
}

/// memcached's ASCII authentication (`-Y`): answers one authentication
/// attempt parsed by [`strata_protocol::text::auth`]. Returns the bytes
/// used and what then happens to the connection, or `None` when it must
/// close at once.
pub(crate) fn authenticate(
    ctx: &mut Ctx<'_>,
    parsed: AuthParse<'_>,
    auth: &mut crate::execution::binary::Auth,
    out: &mut Vec<u8>,
) -> Option<(usize, Outcome)> {
    let users = ctx.shared.cfg.auth_file.as_deref()?;
    let (reply, consumed): (&[u8], usize) = match parsed {
        AuthParse::Incomplete { .. } | AuthParse::Close => return None,
        AuthParse::Unauthenticated { consumed } => (r::UNAUTHENTICATED, consumed),
        AuthParse::BadTermination { consumed } => (r::AUTH_BAD_TERMINATION, consumed),
        AuthParse::BadFormat { consumed } => (r::AUTH_BAD_FORMAT, consumed),
        AuthParse::Credentials { user, password, consumed } => {
            inc(&ctx.stats.auth_cmds);
            if users.check(user, password) {
                auth.authenticated = true;
                auth.failures = 0;
                (r::STORED, consumed)
            } else {
                out.extend_from_slice(r::AUTH_FAILURE);
                let close = auth_failed(ctx, &mut auth.failures);
                let outcome = if close { Outcome::CloseAfterWrite(CloseReason::Error) } else { Outcome::Continue };
                return Some((consumed, outcome));
            }
        }
    };
    out.extend_from_slice(reply);
    Some((consumed, Outcome::Continue))
}
