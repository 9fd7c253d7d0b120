//! Meta commands: runs `mg ms md ma me` through the semantic core
//! ([`crate::execution::core`]) and hands the outcomes to the meta reply encoders in
//! [`strata_protocol::meta::reply`], which own the reply bytes. Each
//! returns [`Flow::Wait`] when its key must first be read from flash, with
//! nothing written: the connection parks and runs it again.

use strata_protocol::meta::reply::{self, Status};
use strata_protocol::meta::Reply;
use strata_protocol::ops;
use strata_protocol::reply::text as r;
use strata_store::{ArithOutcome, DeleteOutcome, Flow, StoreError, StoreOutcome};

use crate::execution::ctx::Ctx;

fn store_error(out: &mut Vec<u8>, e: StoreError) {
    out.extend_from_slice(match e {
        StoreError::TooLarge => r::TOO_LARGE,
        StoreError::NotLogged => r::LOG_FAILED,
        _ => r::OUT_OF_MEMORY_STORING,
    });
}

fn status(o: StoreOutcome) -> Status {
    match o {
        StoreOutcome::Stored => Status::Stored,
        StoreOutcome::NotStored => Status::NotStored,
        StoreOutcome::Exists => Status::Exists,
        StoreOutcome::NotFound => Status::NotFound,
    }
}

pub(crate) fn get(ctx: &mut Ctx<'_>, op: &ops::Get<'_>, rep: &Reply<'_>, value: bool, out: &mut Vec<u8>) -> Flow<()> {
    let now = ctx.shared.store.clock().now();
    ctx.get(op, |it| reply::hit(out, &it, rep, value, now)).map(|r| match r {
        Ok(Some(())) => {}
        Ok(None) => reply::miss(out, rep, op.key.as_bytes()),
        Err(e) => store_error(out, e),
    })
}

pub(crate) fn set(ctx: &mut Ctx<'_>, op: &ops::Set<'_>, rep: &Reply<'_>, out: &mut Vec<u8>) -> Flow<()> {
    ctx.set(op).map(|r| match r {
        Ok(s) => reply::set(out, status(s.outcome), s.cas, s.size, rep, op.key.as_bytes()),
        Err(e) => store_error(out, e),
    })
}

pub(crate) fn too_large(ctx: &mut Ctx<'_>, key: &[u8], out: &mut Vec<u8>) {
    // memcached drops the old item whatever the ms mode.
    ctx.refuse_too_large(key, "set", crate::execution::changes::META_TOO_LARGE_DROPS);
    out.extend_from_slice(r::TOO_LARGE);
}

pub(crate) fn delete(ctx: &mut Ctx<'_>, op: &ops::Delete<'_>, rep: &Reply<'_>, out: &mut Vec<u8>) -> Flow<()> {
    ctx.delete(op).map(|r| {
        let s = match r {
            Ok(DeleteOutcome::Deleted) => Status::Stored,
            Ok(DeleteOutcome::NotFound) => Status::NotFound,
            Ok(DeleteOutcome::Exists) => Status::Exists,
            Err(e) => return store_error(out, e),
        };
        reply::status(out, s, rep, op.key.as_bytes());
    })
}

pub(crate) fn arith(
    ctx: &mut Ctx<'_>,
    op: &ops::Arith<'_>,
    rep: &Reply<'_>,
    value: bool,
    out: &mut Vec<u8>,
) -> Flow<()> {
    let now = ctx.shared.store.clock().now();
    ctx.arith(op).map(|r| {
        let c = match r {
            Ok(c) => c,
            Err(StoreError::NotLogged) => return out.extend_from_slice(r::LOG_FAILED),
            Err(_) => return out.extend_from_slice(r::OUT_OF_MEMORY),
        };
        let k = op.key.as_bytes();
        let s = match c.outcome {
            ArithOutcome::Value(n) => {
                let counted = reply::Counted {
                    value: n,
                    cas: c.cas,
                    expiry_before: c.expiry_before,
                    expiry: c.expiry,
                    created: c.created,
                };
                return reply::counted(out, &counted, rep, k, value, now);
            }
            ArithOutcome::NonNumeric => return out.extend_from_slice(r::NON_NUMERIC),
            ArithOutcome::NotFound => Status::NotFound,
            ArithOutcome::Exists => Status::Exists,
            ArithOutcome::NotStored => Status::NotStored,
        };
        // Not `HD`, so `q` does not hide it.
        reply::status(out, s, rep, k);
    })
}

/// `me`: an item's metadata without counting it as a read.
pub(crate) fn debug(ctx: &mut Ctx<'_>, k: &ops::Key<'_>, out: &mut Vec<u8>) -> Flow<()> {
    let now = ctx.shared.store.clock().now();
    ctx.inspect(k.as_bytes()).map(|i| {
        let Some(i) = i else { return out.extend_from_slice(r::EN) };
        let d = reply::Debug {
            expiry: i.expiry,
            written: i.written,
            cas: i.cas,
            fetched: i.fetched,
            size: i.size,
            binary_key: i.binary_key,
        };
        reply::debug(out, k.as_bytes(), &d, now);
    })
}
