//! Fuzzes the binary-protocol decoder with arbitrary byte streams and checks
//! the invariants the server relies on:
//!
//! - decoding never panics and a decoded request never claims more bytes
//!   than are buffered; only a non-request or an oversized header closes;
//! - `Incomplete` asks only for more than is buffered, and never for more
//!   than one maximal request (so no buffer is sized by a client's length);
//! - a request decodes the same whatever follows it, and every shorter
//!   prefix of it is `Incomplete` (check-then-parse is consistent);
//! - keys and values borrowed from the buffer lie inside the request;
//! - a stream of requests decodes request by request to the end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_protocol::binary::{parse, Command, Parse, HEADER_LEN, READ_WINDOW, REQUEST_MAGIC};
use strata_protocol::ops;
use strata_protocol::text::Config;
use strata_protocol::KEY_MAX_LENGTH;

const ITEM_MAX: usize = 4096;

fn within(buf: &[u8], consumed: usize, part: &[u8]) -> bool {
    let start = buf.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    part.is_empty() || (p >= start + HEADER_LEN && p + part.len() <= start + consumed)
}

fuzz_target!(|data: &[u8]| {
    let cfg = Config { item_size_max: ITEM_MAX, ..Config::default() };
    let max_need = READ_WINDOW.max(HEADER_LEN + 255 + KEY_MAX_LENGTH + ITEM_MAX);
    let mut rest = data;
    while !rest.is_empty() {
        match parse(rest, &cfg) {
            Parse::Close => {
                // Not a request, or a header whose extras and key could not
                // fit the read window.
                let head = |r: &[u8]| HEADER_LEN + r[4] as usize + u16::from_be_bytes([r[2], r[3]]) as usize;
                assert!(rest[0] != REQUEST_MAGIC || (rest.len() >= HEADER_LEN && head(rest) > READ_WINDOW));
                break;
            }
            Parse::Incomplete { need } => {
                assert!(need > rest.len() && need <= max_need, "need {need} of {}", rest.len());
                break;
            }
            Parse::Done { request, consumed } => {
                assert!((HEADER_LEN..=rest.len()).contains(&consumed));
                let key_ok = |key: &[u8]| !key.is_empty() && key.len() <= KEY_MAX_LENGTH && within(rest, consumed, key);
                match request.command {
                    Command::Get { get: ops::Get { key, .. }, .. }
                    | Command::Touch(ops::Get { key, .. })
                    | Command::Delete(ops::Delete { key, .. })
                    | Command::Arith(ops::Arith { key, .. }) => assert!(key_ok(key.as_bytes())),
                    Command::TooLarge { key, .. } => assert!(key_ok(key)),
                    Command::Store(ops::Set { key, data, .. }) => {
                        assert!(key_ok(key.as_bytes()) && within(rest, consumed, data));
                        assert!(key.as_bytes().len() + data.len() <= ITEM_MAX);
                    }
                    Command::SaslAuth { mech, data } | Command::SaslStep { mech, data } => {
                        assert!(within(rest, consumed, mech) && within(rest, consumed, data))
                    }
                    _ => {}
                }
                let same = parse(&rest[..consumed], &cfg);
                assert!(matches!(same, Parse::Done { consumed: c, .. } if c == consumed));
                for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN, consumed - 1] {
                    if cut < consumed {
                        assert!(matches!(parse(&rest[..cut], &cfg), Parse::Incomplete { .. }), "prefix {cut}");
                    }
                }
                rest = &rest[consumed..];
            }
        }
    }
});
