//! Read-ahead of the keys that the requests at the front of a read buffer
//! will look up, so the server can start loading their index buckets and
//! items into the CPU cache before it runs the requests one by one.
//!
//! A hint, not a parse: nothing here decides how a request is answered. It
//! walks whole, plain read requests (`get`, `gets`, `gat`, `gats`, `mg`,
//! and the no-ops `mn` and binary NOOP between them). A text storage
//! command (`set`, `add`, `replace`, `append`, `prepend`, `cas`, `ms`)
//! yields its key and ends the walk, because the bytes after its line are
//! data that may look like commands; binary storage, delete and arithmetic
//! requests carry their length, so their keys are yielded and the walk goes
//! on. Anything else ends it. A malformed request it yields keys for costs a
//! wasted prefetch, nothing more.

use crate::binary::{opcode, HEADER_LEN, REQUEST_MAGIC};
use crate::text::split_tokens;

/// Text and meta commands whose data follows their line.
const STORAGE: [&[u8]; 7] = [b"set ", b"add ", b"replace ", b"append ", b"prepend ", b"cas ", b"ms "];

/// Calls `f` on the keys of the text and meta read requests at the front of
/// `buf` (and of a storage command that ends them), at most `max` keys, and
/// returns how many bytes of `buf` the lines it walked cover (a line whose
/// keys ran past `max` counts as walked).
pub fn text_keys<'a>(buf: &'a [u8], max: usize, mut f: impl FnMut(&'a [u8])) -> usize {
    let mut pos = 0;
    let mut n = 0;
    while n < max {
        let rest = &buf[pos..];
        // (prefix, tokens to skip after it, keys per line)
        let (skip, args_before_keys, one_key) = if rest.starts_with(b"get ") {
            (4, 0, false)
        } else if rest.starts_with(b"gets ") {
            (5, 0, false)
        } else if rest.starts_with(b"mg ") {
            (3, 0, true)
        } else if rest.starts_with(b"gat ") {
            (4, 1, false)
        } else if rest.starts_with(b"gats ") {
            (5, 1, false)
        } else if rest.starts_with(b"mn\r\n") {
            pos += 4;
            continue;
        } else if let Some(skip) = STORAGE.iter().find(|p| rest.starts_with(p)).map(|p| p.len()) {
            // The key of the storage command that ends the walk.
            let Some(nl) = memchr::memchr(b'\n', rest) else { break };
            if let Some((_, key)) = split_tokens(&rest[skip..nl]).next() {
                f(key);
            }
            pos += nl + 1;
            break;
        } else {
            break;
        };
        let Some(nl) = memchr::memchr(b'\n', rest) else { break };
        let line = rest[skip..nl].strip_suffix(b"\r").unwrap_or(&rest[skip..nl]);
        let keys = split_tokens(line).map(|(_, t)| t).skip(args_before_keys);
        for key in keys.take(if one_key { 1 } else { usize::MAX }) {
            if n == max {
                break;
            }
            f(key);
            n += 1;
        }
        pos += nl + 1;
    }
    pos
}

/// Calls `f` on the keys of the binary requests at the front of `buf` that
/// look a key up (gets, storage, delete, arithmetic, touch; NOOPs between
/// them are passed over), at most `max` keys, and returns how many bytes of
/// `buf` the requests walked cover.
pub fn binary_keys<'a>(buf: &'a [u8], max: usize, mut f: impl FnMut(&'a [u8])) -> usize {
    let mut pos = 0;
    let mut n = 0;
    while n < max {
        let rest = &buf[pos..];
        let Some(h) = rest.get(..HEADER_LEN) else { break };
        if h[0] != REQUEST_MAGIC {
            break;
        }
        let key_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let extras_len = usize::from(h[4]);
        let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let Some(request) = rest.get(..HEADER_LEN.saturating_add(body_len)) else { break };
        match h[1] {
            opcode::GET
            | opcode::GETQ
            | opcode::GETK
            | opcode::GETKQ
            | opcode::SET
            | opcode::SETQ
            | opcode::ADD
            | opcode::ADDQ
            | opcode::REPLACE
            | opcode::REPLACEQ
            | opcode::APPEND
            | opcode::APPENDQ
            | opcode::PREPEND
            | opcode::PREPENDQ
            | opcode::DELETE
            | opcode::DELETEQ
            | opcode::INCREMENT
            | opcode::INCREMENTQ
            | opcode::DECREMENT
            | opcode::DECREMENTQ
            | opcode::TOUCH
            | opcode::GAT
            | opcode::GATQ
            | opcode::GATK
            | opcode::GATKQ => {
                let Some(key) = request.get(HEADER_LEN + extras_len..HEADER_LEN + extras_len + key_len) else {
                    break;
                };
                f(key);
                n += 1;
            }
            opcode::NOOP => {}
            _ => break,
        }
        pos += request.len();
    }
    pos
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any bytes: never a panic, never more keys than asked, coverage
        /// inside the buffer, and every key a slice of the buffer.
        #[test]
        fn any_bytes_are_safe(buf in proptest::collection::vec(any::<u8>(), 0..300), max in 0usize..8) {
            let range = buf.as_ptr_range();
            for (keys, covered) in [text(&buf, max), binary(&buf, max)] {
                prop_assert!(keys.len() <= max);
                prop_assert!(covered <= buf.len());
                for k in keys {
                    prop_assert!(range.start <= k.as_ptr() && k.as_ptr_range().end <= range.end);
                }
            }
        }
    }

    fn text(buf: &[u8], max: usize) -> (Vec<&[u8]>, usize) {
        let mut keys = Vec::new();
        let covered = text_keys(buf, max, |k| keys.push(k));
        (keys, covered)
    }

    fn binary(buf: &[u8], max: usize) -> (Vec<&[u8]>, usize) {
        let mut keys = Vec::new();
        let covered = binary_keys(buf, max, |k| keys.push(k));
        (keys, covered)
    }

    fn bin_request(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; HEADER_LEN];
        r[0] = REQUEST_MAGIC;
        r[1] = op;
        r[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
        r[4] = extras.len() as u8;
        let body = (extras.len() + key.len() + value.len()) as u32;
        r[8..12].copy_from_slice(&body.to_be_bytes());
        r.extend_from_slice(extras);
        r.extend_from_slice(key);
        r.extend_from_slice(value);
        r
    }

    #[test]
    fn text_walks_reads_and_stops_at_anything_else() {
        let buf = b"get a b\r\nmg c v t\r\nmn\r\ngets d\ngat 10 e f\r\ndelete x\r\nget y\r\n";
        let (keys, covered) = text(buf, 32);
        assert_eq!(keys, [&b"a"[..], b"b", b"c", b"d", b"e", b"f"]);
        assert_eq!(&buf[covered..], b"delete x\r\nget y\r\n");
    }

    #[test]
    fn text_takes_a_storage_commands_key_and_stops_before_its_data() {
        for (cmd, key) in [
            (&b"set x 0 0 9\r\n"[..], &b"x"[..]),
            (b"add x2 1 2 9\r\n", b"x2"),
            (b"replace r 0 0 9\r\n", b"r"),
            (b"append a 0 0 9\r\n", b"a"),
            (b"prepend p 0 0 9\r\n", b"p"),
            (b"cas c 0 0 9 77\r\n", b"c"),
            (b"ms m 9 T0\r\n", b"m"),
        ] {
            let buf = [&b"get g\r\n"[..], cmd, b"get y\r\n\r\n"].concat();
            let (keys, covered) = text(&buf, 32);
            assert_eq!(keys, [&b"g"[..], key]);
            // The data (here "get y\r\n") is never read as a command.
            assert_eq!(&buf[covered..], b"get y\r\n\r\n");
        }
        assert_eq!(text(b"set k 0 0 1\r\n", 0), (vec![], 0));
        assert_eq!(text(b"set k 0 0 1", 32), (vec![], 0), "an unfinished line is not walked");
    }

    #[test]
    fn text_stops_at_a_partial_line_and_at_max() {
        let (keys, covered) = text(b"get a\r\nget b c", 32);
        assert_eq!((keys, covered), (vec![&b"a"[..]], 7));
        let (keys, covered) = text(b"get a b c\r\nget d\r\n", 2);
        assert_eq!((keys, covered), (vec![&b"a"[..], b"b"], 11));
        assert_eq!(text(b"", 32), (vec![], 0));
        assert_eq!(text(b"get a\r\n", 0), (vec![], 0));
    }

    #[test]
    fn binary_walks_gets_and_noops_and_stops_at_anything_else() {
        let mut buf = bin_request(opcode::GETKQ, &[], b"k1", &[]);
        buf.extend(bin_request(opcode::NOOP, &[], &[], &[]));
        buf.extend(bin_request(opcode::GET, &[], b"k2", &[]));
        // A value is length-delimited, so the walk goes on past it.
        buf.extend(bin_request(opcode::SETQ, &[0; 8], b"k3", b"GET"));
        buf.extend(bin_request(opcode::DELETE, &[], b"k4", &[]));
        buf.extend(bin_request(opcode::INCREMENT, &[0; 20], b"k5", &[]));
        let walked = buf.len();
        buf.extend(bin_request(opcode::FLUSH, &[], &[], &[]));
        buf.extend(bin_request(opcode::GET, &[], b"k6", &[]));
        let (keys, covered) = binary(&buf, 32);
        assert_eq!((keys, covered), (vec![&b"k1"[..], b"k2", b"k3", b"k4", b"k5"], walked));
    }

    #[test]
    fn binary_stops_at_a_partial_request_or_bad_magic() {
        let full = bin_request(opcode::GET, &[], b"key", &[]);
        assert_eq!(binary(&full[..full.len() - 1], 32), (vec![], 0));
        let mut bad = full.clone();
        bad[0] = 0x81;
        assert_eq!(binary(&bad, 32), (vec![], 0));
        // A key longer than its body is malformed: no key, no panic.
        let mut lying = full.clone();
        lying[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(binary(&lying, 32), (vec![], 0));
    }
}
