use proptest::prelude::*;

use super::response::{self, Body};
use super::*;

fn cfg() -> Config {
    Config { item_size_max: 1000, ..Config::default() }
}

/// A request packet; `bodylen` overrides the computed body length.
fn pkt(op: u8, extras: &[u8], key: &[u8], value: &[u8], bodylen: Option<u32>) -> Vec<u8> {
    let mut p = vec![REQUEST_MAGIC, op];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]);
    let len = bodylen.unwrap_or((extras.len() + key.len() + value.len()) as u32);
    p.extend_from_slice(&len.to_be_bytes());
    p.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
    p.extend_from_slice(&0u64.to_be_bytes());
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

fn command(buf: &[u8]) -> (Command<'_>, usize) {
    match parse(buf, &cfg()) {
        Parse::Done { request, consumed } => (request.command, consumed),
        other => panic!("{other:?}"),
    }
}

#[test]
fn header_fields_are_big_endian_at_their_offsets() {
    let mut p = pkt(opcode::GETK, b"", b"foo", b"", None);
    p[16..24].copy_from_slice(&7u64.to_be_bytes());
    assert_eq!(p.len(), HEADER_LEN + 3);
    let Some(h) = p.first_chunk().and_then(Header::decode) else { panic!("not a request") };
    assert_eq!(h, Header { opcode: opcode::GETK, keylen: 3, extlen: 0, bodylen: 3, opaque: 0xdead_beef, cas: 7 });
    assert!(!h.quiet());
    let mut out = Vec::new();
    response::packet(&mut out, &h, Status::KeyExists, 9, Body { extras: b"ab", key: b"k", value: b"xyz" });
    assert_eq!(
        out,
        [&[0x81, 0x0c, 0, 1, 2, 0, 0, 2, 0, 0, 0, 6, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 9][..], b"abkxyz"]
            .concat()
    );
    out.clear();
    response::error(&mut out, &h, Status::KeyNotFound);
    assert_eq!(&out[HEADER_LEN..], b"Not found");
    assert_eq!(out[11], 9);
}

#[test]
fn gets_and_stores_borrow_key_and_value() {
    let key = |k| ops::Key::Raw(k);
    let p = pkt(opcode::GETKQ, b"", b"key", b"", None);
    let get = ops::Get::plain(key(b"key"));
    assert_eq!(command(&p), (Command::Get { get, with_key: true }, 27));
    let p = pkt(opcode::GATQ, &9u32.to_be_bytes(), b"key", b"", None);
    let get = ops::Get { key: key(b"key"), read: Read::get_and_touch(9) };
    assert_eq!(command(&p).0, Command::Get { get, with_key: false });
    let p = pkt(opcode::TOUCH, &u32::MAX.to_be_bytes(), b"key", b"", None);
    let get = ops::Get { key: key(b"key"), read: Read::touch(i32::MAX) };
    assert_eq!(command(&p).0, Command::Touch(get), "times past i32 are far future");
    let mut extras = 5u32.to_be_bytes().to_vec();
    extras.extend_from_slice(&60u32.to_be_bytes());
    let p = pkt(opcode::ADDQ, &extras, b"k", b"value", None);
    let (c, used) = command(&p);
    assert_eq!(c, Command::Store(ops::Set::plain(Mode::Add, key(b"k"), 5, 60, b"value")));
    assert_eq!(used, p.len());
    let p = pkt(opcode::PREPEND, b"", b"k", b"v", None);
    assert_eq!(command(&p).0, Command::Store(ops::Set::plain(Mode::Prepend, key(b"k"), 0, 0, b"v")));
}

#[test]
fn a_cas_in_the_header_is_the_compare_value() {
    let key = |k| ops::Key::Raw(k);
    for (opcode, mode) in [(opcode::SET, Mode::Set), (opcode::ADD, Mode::Set), (opcode::REPLACEQ, Mode::Set)] {
        let mut p = pkt(opcode, &[0; 8], b"k", b"v", None);
        p[16..24].copy_from_slice(&7u64.to_be_bytes());
        let want = ops::Set { compare: Some(7), ..ops::Set::plain(mode, key(b"k"), 0, 0, b"v") };
        assert_eq!(command(&p).0, Command::Store(want), "opcode {opcode:#x}");
    }
    let mut p = pkt(opcode::APPEND, b"", b"k", b"v", None);
    p[16..24].copy_from_slice(&7u64.to_be_bytes());
    let want = ops::Set { compare: Some(7), ..ops::Set::plain(Mode::Append, key(b"k"), 0, 0, b"v") };
    assert_eq!(command(&p).0, Command::Store(want), "append keeps its mode");
    let mut p = pkt(opcode::DELETE, b"", b"k", b"", None);
    p[16..24].copy_from_slice(&7u64.to_be_bytes());
    let want = ops::Delete { compare: Some(7), ..ops::Delete::plain(key(b"k")) };
    assert_eq!(command(&p).0, Command::Delete(want));
}

#[test]
fn arith_flush_stat_and_sasl_decode_their_extras() {
    let mut extras = 3u64.to_be_bytes().to_vec();
    extras.extend_from_slice(&10u64.to_be_bytes());
    extras.extend_from_slice(&u32::MAX.to_be_bytes());
    let p = pkt(opcode::DECREMENTQ, &extras, b"n", b"", None);
    let want = ops::Arith { initial: 10, ..ops::Arith::plain(ops::Key::Raw(b"n"), false, 3) };
    assert_eq!(command(&p).0, Command::Arith(want), "0xffffffff: no vivify");
    let mut extras = 3u64.to_be_bytes().to_vec();
    extras.extend_from_slice(&10u64.to_be_bytes());
    extras.extend_from_slice(&60u32.to_be_bytes());
    let p = pkt(opcode::INCREMENT, &extras, b"n", b"", None);
    let want = ops::Arith { initial: 10, vivify: Some(60), ..ops::Arith::plain(ops::Key::Raw(b"n"), true, 3) };
    assert_eq!(command(&p).0, Command::Arith(want));
    assert_eq!(command(&pkt(opcode::FLUSH, &[0, 0, 0, 5], b"", b"", None)).0, Command::Flush { delay: 5 });
    assert_eq!(command(&pkt(opcode::FLUSHQ, b"", b"", b"", None)).0, Command::Flush { delay: 0 });
    assert_eq!(command(&pkt(opcode::STAT, b"", b"items", b"", None)).0, Command::Stat { group: b"items" });
    let p = pkt(opcode::SASL_AUTH, b"", b"PLAIN", b"\0u\0p", None);
    assert_eq!(command(&p), (Command::SaslAuth { mech: b"PLAIN", data: b"\0u\0p" }, p.len()));
}

#[test]
fn requests_wait_for_the_bytes_they_read() {
    let p = pkt(opcode::SET, &[0; 8], b"k", b"value", None);
    for cut in 0..p.len() {
        // The header, then extras and key (judged first), then the value.
        let want = match cut {
            c if c < HEADER_LEN => HEADER_LEN,
            c if c < HEADER_LEN + 9 => HEADER_LEN + 9,
            _ => p.len(),
        };
        assert_eq!(parse(&p[..cut], &cfg()), Parse::Incomplete { need: want }, "cut at {cut}");
    }
}

/// Decodes a packet from its header, extras and key alone, after checking
/// that one byte fewer decides nothing.
fn judged(p: &[u8]) -> Command<'_> {
    let h = p.first_chunk::<HEADER_LEN>().and_then(Header::decode).map_or(0, |h| h.extlen as usize + h.keylen as usize);
    assert_eq!(parse(&p[..HEADER_LEN + h - 1], &cfg()), Parse::Incomplete { need: HEADER_LEN + h });
    command(&p[..HEADER_LEN + h]).0
}

#[test]
fn header_checks_wait_for_extras_and_key_only() {
    // Key and extras longer than the body: unknown command, then close.
    assert_eq!(judged(&pkt(opcode::GET, b"", b"key", b"", Some(2))), Command::Malformed);
    // A key over 250 bytes, extras of the wrong size, a body that does not
    // match: invalid arguments, without waiting for the value.
    let long = vec![b'k'; 251];
    assert_eq!(judged(&pkt(opcode::GET, b"", &long, b"", None)), Command::Invalid);
    assert_eq!(judged(&pkt(opcode::SET, &[0; 4], b"k", b"v", None)), Command::Invalid);
    assert_eq!(judged(&pkt(opcode::GET, b"", b"k", b"v", None)), Command::Invalid);
    assert_eq!(judged(&pkt(opcode::DELETE, &[0], b"", b"", None)), Command::Invalid);
    assert_eq!(command(&pkt(opcode::NOOP, b"", b"", b"x", None)[..HEADER_LEN]).0, Command::Invalid);
    // A refused request accounts for the bytes it was judged on, so it
    // decodes alike from exactly those bytes (found by the fuzz target).
    let p = pkt(opcode::DECREMENTQ, &[0; 20], b"", b"", Some(1 << 24));
    assert_eq!(command(&p[..HEADER_LEN + 20]), (Command::Invalid, HEADER_LEN + 20));
    // A header, extras and key that cannot fit memcached's read buffer: close.
    let p = pkt(opcode::GET, b"", &[], b"", None);
    let mut big = p[..HEADER_LEN].to_vec();
    big[2..4].copy_from_slice(&(READ_WINDOW as u16).to_be_bytes());
    assert_eq!(parse(&big, &cfg()), Parse::Close);
    // Not a request: close.
    let mut p = pkt(opcode::NOOP, b"", b"", b"", None);
    p[0] = RESPONSE_MAGIC;
    assert_eq!(parse(&p, &cfg()), Parse::Close);
}

#[test]
fn unknown_opcodes_swallow_the_body_length_after_extras_and_key() {
    // memcached's count: extras and key are read, then `bodylen` more bytes
    // are skipped.
    let p = pkt(0x55, &[1, 2, 3, 4], b"abcd", b"", None);
    assert_eq!(command(&p), (Command::Unknown { swallow: 8 }, HEADER_LEN + 8));
    let p = pkt(0x55, b"", b"", b"", Some(u32::MAX));
    assert_eq!(command(&p), (Command::Unknown { swallow: u32::MAX as usize }, HEADER_LEN));
    // VERBOSITY is not served by memcached 1.6.
    let p = pkt(opcode::VERBOSITY, &[0, 0, 0, 1], b"", b"", None);
    assert_eq!(command(&p), (Command::Unknown { swallow: 4 }, HEADER_LEN + 4));
}

#[test]
fn sasl_limits_refuse_and_skip() {
    let mech = [b'M'; 33];
    let p = pkt(opcode::SASL_AUTH, b"", &mech, b"data", None);
    assert_eq!(command(&p), (Command::Reject { status: Status::InvalidArguments, swallow: 4 }, HEADER_LEN + 33));
    let p = pkt(opcode::SASL_AUTH, b"", b"PLAIN", b"", Some(5 + 1001));
    assert_eq!(command(&p), (Command::Reject { status: Status::OutOfMemory, swallow: 1001 }, HEADER_LEN + 5));
    let p = pkt(opcode::SASL_STEP, b"", b"PLAIN", &[0; 1000], None);
    assert!(matches!(command(&p).0, Command::SaslStep { mech: b"PLAIN", .. }));
}

#[test]
fn a_value_over_the_limit_is_refused_from_its_header() {
    let p = pkt(opcode::SET, &[0; 8], b"big", b"", Some(8 + 3 + 5000));
    assert_eq!(parse(&p[..HEADER_LEN + 5], &cfg()), Parse::Incomplete { need: HEADER_LEN + 11 });
    let p = [p, b"big".to_vec()].concat();
    assert_eq!(command(&p), (Command::TooLarge { mode: Mode::Set, key: b"big", swallow: 5000 }, HEADER_LEN + 11));
}

#[test]
fn quiet_opcodes() {
    let quiet = [0x09, 0x0d, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1e, 0x24];
    for op in 0..=255u8 {
        let h = Header { opcode: op, keylen: 0, extlen: 0, bodylen: 0, opaque: 0, cas: 0 };
        assert_eq!(h.quiet(), quiet.contains(&op), "opcode {op:#x}");
    }
}

proptest! {
    /// Any bytes: no panic; a request uses at most what is buffered; more
    /// input is asked for only beyond what is there, and never more than one
    /// item plus its header, key and extras.
    #[test]
    fn parse_is_total_and_bounded(mut buf in proptest::collection::vec(any::<u8>(), 0..600), op in any::<u8>()) {
        if buf.len() > 1 {
            buf[0] = REQUEST_MAGIC;
            buf[1] = op % 0x28;
        }
        match parse(&buf, &cfg()) {
            Parse::Done { consumed, .. } => prop_assert!(consumed >= HEADER_LEN && consumed <= buf.len()),
            Parse::Incomplete { need } => {
                prop_assert!(need > buf.len());
                prop_assert!(need <= READ_WINDOW.max(HEADER_LEN + 255 + KEY_MAX_LENGTH + cfg().item_size_max));
            }
            // Not a request, or a header, extras and key over the read window.
            Parse::Close => prop_assert!(
                buf[0] != REQUEST_MAGIC
                    || (buf.len() >= HEADER_LEN
                        && HEADER_LEN + usize::from(buf[4]) + usize::from(u16::from_be_bytes([buf[2], buf[3]])) > READ_WINDOW)
            ),
        }
    }
}
