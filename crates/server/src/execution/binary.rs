//! Executes binary-protocol requests. Decoding and packet layout live in
//! [`strata_protocol::binary`]; every data command runs through the semantic
//! core ([`crate::execution::core`]) exactly as its text and meta forms do. This file
//! only maps outcomes onto memcached's status codes and bodies, and applies
//! the quiet opcodes' rule: success (and a get's miss) is not answered, an
//! error always is.

use strata_protocol::binary::response::{self, Body};
use strata_protocol::binary::{opcode, Command, Header, Request, Status};
use strata_protocol::ops;
use strata_protocol::text::Tokens;
use strata_store::{ArithOutcome, DeleteOutcome, Flow, StoreError, StoreOutcome};

use crate::execution::changes;
use crate::execution::ctx::{ready, Ctx, Outcome};
use crate::observability::inc;
use crate::observability::stats;
use crate::CloseReason;

/// The only SASL mechanism offered.
const MECHS: &[u8] = response::SASL_MECHS;
const AUTHENTICATED: &[u8] = response::SASL_AUTHENTICATED;

/// A connection's authentication state (SASL for binary, `-Y` for text).
#[derive(Debug, Default)]
pub(crate) struct Auth {
    pub authenticated: bool,
    /// `SASL_AUTH PLAIN` came without credentials; `SASL_STEP` brings them.
    plain_pending: bool,
    /// Failed attempts in a row (SASL or ASCII); see
    /// [`crate::execution::ctx::MAX_AUTH_FAILURES`].
    pub failures: u32,
}

impl Auth {
    /// Starts a new authentication exchange: the old state, and this one
    /// unauthenticated. The failure count carries over.
    fn restart(&mut self) -> Auth {
        std::mem::replace(self, Auth { failures: self.failures, ..Auth::default() })
    }
}

/// Runs one request, appending its response (if any) to `out`.
pub(crate) fn execute(ctx: &mut Ctx<'_>, req: Request<'_>, auth: &mut Auth, out: &mut Vec<u8>) -> Outcome {
    let h = &req.header;
    if let Command::Malformed = req.command {
        response::error(out, h, Status::UnknownCommand);
        return Outcome::CloseAfterWrite(CloseReason::Error);
    }
    let open = matches!(h.opcode, opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION);
    if ctx.shared.cfg.sasl.is_some() && !auth.authenticated && !open {
        response::error(out, h, Status::AuthError);
        return Outcome::CloseAfterWrite(CloseReason::Error);
    }
    if changes::binary(&req.command) && ctx.shared.store.journal_failed() {
        // Refused before it runs, as a change the store refuses is: an
        // error, answered to quiet opcodes too. A refused value's bytes
        // are still discarded.
        response::error(out, h, Status::OutOfMemory);
        return match req.command {
            Command::TooLarge { swallow, .. } => Outcome::Swallow(swallow),
            _ => Outcome::Continue,
        };
    }
    match req.command {
        Command::Malformed => {}
        Command::Invalid => {
            response::error(out, h, Status::InvalidArguments);
            return Outcome::CloseAfterWrite(CloseReason::Error);
        }
        Command::Unknown { swallow } => {
            response::error(out, h, Status::UnknownCommand);
            return Outcome::Swallow(swallow);
        }
        Command::Reject { status, swallow } => {
            response::error(out, h, status);
            return Outcome::Swallow(swallow);
        }
        c @ (Command::Get { .. } | Command::Touch(_)) => return read(ctx, c, h, out),
        c @ (Command::Store(_)
        | Command::TooLarge { .. }
        | Command::Delete(_)
        | Command::Arith(_)
        | Command::Flush { .. }) => return change(ctx, c, h, out),
        Command::Quit => {
            ok(out, h, 0, Body::default());
            return Outcome::CloseAfterWrite(CloseReason::Normal);
        }
        Command::Noop => response::packet(out, h, Status::Success, 0, Body::default()),
        Command::Version => {
            let body = Body { value: stats::VERSION.as_bytes(), ..Body::default() };
            response::packet(out, h, Status::Success, 0, body);
        }
        Command::Stat { group } => strata_protocol::stats::binary(out, h, &stats::command(ctx.shared, Tokens(group))),
        c => return sasl_command(ctx, c, h, auth, out),
    }
    Outcome::Continue
}

/// A success reply, unless the opcode is quiet.
fn ok(out: &mut Vec<u8>, h: &Header, cas: u64, body: Body<'_>) {
    if !h.quiet() {
        response::packet(out, h, Status::Success, cas, body);
    }
}

/// GET, GETQ, GETK, GETKQ, GAT… and TOUCH.
fn read(ctx: &mut Ctx<'_>, command: Command<'_>, h: &Header, out: &mut Vec<u8>) -> Outcome {
    let quiet = h.quiet();
    match command {
        Command::Get { get, with_key } => {
            let hit = ctx.get(&get, |it| {
                let body =
                    Body { extras: &it.flags.to_be_bytes(), key: if with_key { it.key } else { b"" }, value: it.value };
                response::packet(out, h, Status::Success, it.cas, body);
            });
            let hit = ready!(hit);
            ctx.shared.detail.record_get(get.key.as_bytes(), matches!(hit, Ok(Some(()))));
            match hit {
                Ok(Some(())) => {}
                Ok(None) if quiet => {}
                // GETK and GATK name the key they missed, without a message.
                Ok(None) if with_key => response::packet(
                    out,
                    h,
                    Status::KeyNotFound,
                    0,
                    Body { key: get.key.as_bytes(), ..Body::default() },
                ),
                Ok(None) => response::error(out, h, Status::KeyNotFound),
                Err(_) => response::error(out, h, Status::OutOfMemory),
            }
        }
        Command::Touch(get) => {
            let r = ready!(ctx.get(&get, |it| (it.flags, it.cas)));
            ctx.shared.detail.record_get(get.key.as_bytes(), matches!(r, Ok(Some(_))));
            match r {
                Ok(Some((flags, cas))) => response::packet(
                    out,
                    h,
                    Status::Success,
                    cas,
                    Body { extras: &flags.to_be_bytes(), ..Body::default() },
                ),
                Ok(None) => response::error(out, h, Status::KeyNotFound),
                Err(_) => response::error(out, h, Status::OutOfMemory),
            }
        }
        _ => unreachable_command(out, h),
    }
    Outcome::Continue
}

/// The storage commands, DELETE, INCREMENT/DECREMENT and FLUSH.
fn change(ctx: &mut Ctx<'_>, command: Command<'_>, h: &Header, out: &mut Vec<u8>) -> Outcome {
    match command {
        Command::Store(set) => {
            let r = ready!(ctx.set(&set));
            ctx.shared.detail.record_set(set.key.as_bytes());
            match r {
                Ok(stored) => match stored.outcome {
                    StoreOutcome::Stored => ok(out, h, stored.cas, Body::default()),
                    StoreOutcome::Exists => response::error(out, h, Status::KeyExists),
                    StoreOutcome::NotFound => response::error(out, h, Status::KeyNotFound),
                    StoreOutcome::NotStored => response::error(
                        out,
                        h,
                        match set.mode {
                            ops::Mode::Add => Status::KeyExists,
                            ops::Mode::Replace => Status::KeyNotFound,
                            _ => Status::NotStored,
                        },
                    ),
                },
                Err(StoreError::TooLarge) => response::error(out, h, Status::TooLarge),
                Err(_) => response::error(out, h, Status::OutOfMemory),
            }
        }
        Command::TooLarge { mode, key, swallow } => {
            // memcached: a binary SET drops the old item, with a CAS or not.
            ctx.shared.detail.record_set(key);
            ctx.refuse_too_large(
                key,
                crate::execution::core::store_cmd(mode, false),
                changes::binary_too_large_drops(mode),
            );
            response::error(out, h, Status::TooLarge);
            return Outcome::Swallow(swallow);
        }
        Command::Delete(del) => {
            let r = ready!(ctx.delete(&del));
            ctx.shared.detail.record_delete(del.key.as_bytes());
            match r {
                Ok(DeleteOutcome::Deleted) => ok(out, h, 0, Body::default()),
                Ok(DeleteOutcome::Exists) => response::error(out, h, Status::KeyExists),
                Ok(DeleteOutcome::NotFound) => response::error(out, h, Status::KeyNotFound),
                Err(_) => response::error(out, h, Status::OutOfMemory),
            }
        }
        Command::Arith(arith) => match ctx.arith(&arith) {
            Flow::Wait(t) => return Outcome::wait(t),
            Flow::Ready(Ok(c)) => match c.outcome {
                ArithOutcome::Value(v) => ok(out, h, c.cas, Body { value: &v.to_be_bytes(), ..Body::default() }),
                ArithOutcome::NotFound => response::error(out, h, Status::KeyNotFound),
                ArithOutcome::NonNumeric => response::error(out, h, Status::DeltaBadValue),
                ArithOutcome::Exists => response::error(out, h, Status::KeyExists),
                ArithOutcome::NotStored => response::error(out, h, Status::NotStored),
            },
            Flow::Ready(Err(_)) => response::error(out, h, Status::OutOfMemory),
        },
        Command::Flush { delay } => match ctx.flush_all(delay) {
            Ok(true) => ok(out, h, 0, Body::default()),
            Ok(false) => response::error(out, h, Status::AuthError),
            Err(_) => response::error(out, h, Status::OutOfMemory),
        },
        _ => unreachable_command(out, h),
    }
    Outcome::Continue
}

/// The SASL commands (LIST_MECHS, AUTH, STEP).
fn sasl_command(ctx: &mut Ctx<'_>, command: Command<'_>, h: &Header, auth: &mut Auth, out: &mut Vec<u8>) -> Outcome {
    let sasl_on = ctx.shared.cfg.sasl.is_some();
    match command {
        Command::SaslListMechs | Command::SaslAuth { .. } | Command::SaslStep { .. } if !sasl_on => {
            response::error(out, h, Status::UnknownCommand)
        }
        // memcached restarts its SASL exchange on every SASL command: a
        // connection that lists mechanisms or authenticates again is no
        // longer authenticated, and a second login fails.
        Command::SaslListMechs => {
            auth.restart();
            response::packet(out, h, Status::Success, 0, Body { value: MECHS, ..Body::default() });
        }
        Command::SaslAuth { mech, data } => {
            inc(&ctx.stats.auth_cmds);
            let was = auth.restart();
            let status = if was.authenticated || !mech.eq_ignore_ascii_case(MECHS) {
                Status::AuthError
            } else if data.is_empty() {
                // PLAIN without an initial response: the credentials come
                // in the next step.
                auth.plain_pending = true;
                Status::AuthContinue
            } else {
                plain(ctx, auth, data)
            };
            return sasl_reply(ctx, out, h, status, auth);
        }
        Command::SaslStep { mech, data } => {
            inc(&ctx.stats.auth_cmds);
            let was = auth.restart();
            let status = match was.plain_pending && mech.eq_ignore_ascii_case(MECHS) {
                true => plain(ctx, auth, data),
                false => Status::AuthError,
            };
            return sasl_reply(ctx, out, h, status, auth);
        }
        _ => unreachable_command(out, h),
    }
    Outcome::Continue
}

/// A command [`execute`] hands to a helper that does not take it: cannot
/// happen (each helper's caller matches its commands); answered as an
/// unknown command rather than a panic on a network path.
fn unreachable_command(out: &mut Vec<u8>, h: &Header) {
    debug_assert!(false, "a command reached a helper that does not serve it");
    response::error(out, h, Status::UnknownCommand);
}

/// Checks PLAIN credentials, authenticating the connection if they hold.
fn plain(ctx: &Ctx<'_>, auth: &mut Auth, data: &[u8]) -> Status {
    match ctx.shared.cfg.sasl.as_deref() {
        Some(users) if users.check_plain(data) => {
            auth.authenticated = true;
            auth.failures = 0;
            Status::Success
        }
        _ => Status::AuthError,
    }
}

/// The reply to a SASL step; a failure may close the connection
/// ([`crate::execution::ctx::MAX_AUTH_FAILURES`]).
fn sasl_reply(ctx: &Ctx<'_>, out: &mut Vec<u8>, h: &Header, status: Status, auth: &mut Auth) -> Outcome {
    match status {
        Status::Success => {
            response::packet(out, h, Status::Success, 0, Body { value: AUTHENTICATED, ..Body::default() })
        }
        Status::AuthContinue => response::packet(out, h, Status::AuthContinue, 0, Body::default()),
        other => {
            response::error(out, h, other);
            if crate::execution::ctx::auth_failed(ctx, &mut auth.failures) {
                return Outcome::CloseAfterWrite(CloseReason::Error);
            }
        }
    }
    Outcome::Continue
}
