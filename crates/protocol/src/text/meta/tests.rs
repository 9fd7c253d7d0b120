use proptest::prelude::*;

use crate::ops::{Key, Mode};
use crate::text::{parse, ClientError, Command, Config, Parse};

fn cfg() -> Config {
    Config { item_size_max: 1024, item_overhead: 0, max_get_line: 8192, debug_clock: false }
}

fn cmd(buf: &[u8]) -> (Command<'_>, usize) {
    match parse(buf, &cfg()) {
        Parse::Done { request, consumed } => (request.command, consumed),
        other => panic!("expected a request, got {other:?}"),
    }
}

fn err(buf: &[u8]) -> ClientError {
    match cmd(buf).0 {
        Command::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn mg_flags_become_the_read_and_keep_their_order_for_the_reply() {
    let (c, used) = cmd(b"mg foo T30 v k Oab N5 R10 u E77 l q\r\n");
    assert_eq!(used, 37);
    let Command::MetaGet { get, reply, value } = c else { panic!("{c:?}") };
    assert!(value && reply.quiet && !reply.base64);
    assert_eq!(get.key, Key::Raw(b"foo"));
    let r = get.read;
    assert_eq!((r.touch, r.vivify, r.recache, r.new_cas), (Some(30), Some(5), Some(10), Some(77)));
    assert!(!r.bump && r.last_access);
    let flags: Vec<&[u8]> = reply.flags.iter().collect();
    assert_eq!(flags, [&b"T30"[..], b"v", b"k", b"Oab", b"N5", b"R10", b"u", b"E77", b"l", b"q"]);
}

#[test]
fn flag_errors_follow_memcached() {
    assert_eq!(err(b"mg foo v v\r\n"), ClientError::DuplicateFlag);
    assert_eq!(err(b"mg foo !\r\n"), ClientError::InvalidFlag);
    assert_eq!(err(b"mg foo Tx\r\n"), ClientError::BadToken);
    assert_eq!(err(b"mg foo MEE\r\n"), ClientError::MTokenLength);
    // memcached folds every ma/md flag error into one message.
    assert_eq!(err(b"ma foo Jx\r\n"), ClientError::InvalidOrDuplicateFlag);
    assert_eq!(err(b"ma foo D-1\r\n"), ClientError::InvalidOrDuplicateFlag);
    assert_eq!(err(b"ma foo MX\r\n"), ClientError::InvalidArithMode);
    assert_eq!(err(b"mg\r\n"), ClientError::Error);
    let long = format!("mg {}\r\n", "k".repeat(251));
    assert_eq!(err(long.as_bytes()), ClientError::BadFormat);
    let many = format!("mg foo {}\r\n", "O1 ".repeat(18));
    assert_eq!(err(many.as_bytes()), ClientError::OptionsTooLong);
    let opaque = format!("mg foo O{}\r\n", "1".repeat(33));
    assert_eq!(err(opaque.as_bytes()), ClientError::OpaqueTooLong);
}

#[test]
fn base64_keys_are_decoded_and_bad_ones_refused() {
    let (c, _) = cmd(b"mg Zm9v b v\r\n");
    let Command::MetaGet { get, reply, .. } = c else { panic!("{c:?}") };
    assert_eq!(get.key.as_bytes(), b"foo");
    assert!(reply.base64);
    assert_eq!(err(b"mg Zm9*v b\r\n"), ClientError::KeyDecode);
    let mut out = Vec::new();
    super::encode_key(b"foo", &mut out);
    assert_eq!(out, b"Zm9v");
}

#[test]
fn ms_waits_for_its_data_and_maps_modes() {
    assert_eq!(parse(b"ms foo 5 MA\r\nab", &cfg()), Parse::Incomplete { need: 20 });
    let (c, used) = cmd(b"ms foo 5 MA N30 F7 T9 C3\r\nhello\r\n");
    assert_eq!(used, 33);
    let Command::MetaSet { set, .. } = c else { panic!("{c:?}") };
    assert_eq!((set.mode, set.data, set.flags, set.exptime), (Mode::Append, &b"hello"[..], 7, 9));
    assert_eq!((set.vivify, set.compare), (Some(30), Some(3)));
    // Replace with a compare value runs as cas, as in memcached.
    let (c, _) = cmd(b"ms foo 1 MR C3\r\nx\r\n");
    let Command::MetaSet { set, .. } = c else { panic!("{c:?}") };
    assert_eq!(set.mode, Mode::Set);
}

#[test]
fn ms_errors_after_the_length_swallow_the_data() {
    let swallow = |buf: &[u8]| match cmd(buf).0 {
        Command::Swallow { error, swallow } => (error, swallow),
        other => panic!("{other:?}"),
    };
    assert_eq!(swallow(b"ms foo 5 MZ\r\n"), (ClientError::InvalidSetMode, 7));
    assert_eq!(swallow(b"ms foo 5 v v\r\n"), (ClientError::DuplicateFlag, 7));
    assert_eq!(err(b"ms foo x\r\n"), ClientError::BadFormat);
    assert_eq!(err(b"ms foo\r\n"), ClientError::BadFormat);
    let (c, used) = cmd(b"ms foo 2000 T0\r\n");
    assert!(matches!(c, Command::MetaTooLarge { swallow: 2002, .. }), "{c:?}");
    assert_eq!(used, 16);
    let (c, used) = cmd(b"ms foo 2\r\nabXY");
    assert_eq!((c, used), (Command::Error(ClientError::BadDataChunk), 14));
}

#[test]
fn md_carries_ttl_and_flags_for_invalidate_and_empty() {
    let (c, _) = cmd(b"md foo I T30 x F5\r\n");
    let Command::MetaDelete { del, .. } = c else { panic!("{c:?}") };
    assert_eq!((del.touch, del.invalidate, del.remove_value, del.flags), (Some(30), true, true, 5));
}

#[test]
fn mn_and_me() {
    assert_eq!(cmd(b"mn\r\n"), (Command::MetaNoop, 4));
    let (c, _) = cmd(b"me Zm9v b\r\n");
    assert!(matches!(c, Command::MetaDebug { base64: true, ref key } if key.as_bytes() == b"foo"), "{c:?}");
}

fn flag_token() -> impl Strategy<Value = String> {
    ("[a-zA-Z!+-]", "[-0-9A-Za-z]{0,6}").prop_map(|(f, a)| format!("{f}{a}"))
}

proptest! {
    /// Meta lines with any flags and tokens: the parser never panics, never
    /// claims more than it was given, and `ms` data is the declared size.
    #[test]
    fn meta_parse_is_total(cmd in "m[gsdaen]", key in "[a-zA-Z0-9=+/]{0,12}", len in 0usize..40,
                           flags in proptest::collection::vec(flag_token(), 0..24),
                           tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = if cmd == "ms" {
            format!("{cmd} {key} {len} {}\r\n", flags.join(" ")).into_bytes()
        } else {
            format!("{cmd} {key} {}\r\n", flags.join(" ")).into_bytes()
        };
        buf.extend_from_slice(&tail);
        match parse(&buf, &cfg()) {
            Parse::Done { request, consumed } => {
                prop_assert!(consumed > 0 && consumed <= buf.len());
                if let Command::MetaSet { set, .. } = request.command {
                    prop_assert_eq!(set.data.len(), len);
                }
            }
            Parse::Incomplete { need } => prop_assert!(need > buf.len()),
            Parse::Close => prop_assert!(false, "meta lines never close"),
        }
    }
}
