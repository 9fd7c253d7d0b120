//! Fuzzes UDP's frame header and reply framing with arbitrary datagrams
//! and checks the invariants the server relies on:
//!
//! - parsing never panics; a header is found exactly when the datagram
//!   holds eight bytes, and writing it back gives those bytes;
//! - a request is served only when it is the whole request (`total` 1);
//! - a reply cut into datagrams (the datagram's bytes taken as one) is
//!   numbered 0.. with the right count, each datagram within the size
//!   limit, and carries the reply whole, or the one error past the bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_protocol::reply::text::UDP_TOO_LARGE;
use strata_protocol::udp::{frames, Frame, DATAGRAM, HEADER, MAX_REPLY};

fuzz_target!(|data: &[u8]| {
    let frame = Frame::parse(data);
    assert_eq!(frame.is_some(), data.len() >= HEADER);
    if let Some(f) = frame {
        assert_eq!(&f.bytes()[..], &data[..HEADER]);
        assert_eq!(Frame::request(data), (f.total == 1).then_some(f));
    } else {
        assert_eq!(Frame::request(data), None);
    }

    // A reply as long as the datagram, or past the bound when the first
    // byte is odd.
    let id = frame.map_or(0, |f| f.id);
    let long;
    let reply = if data.first().is_some_and(|b| b & 1 == 1) {
        long = data.iter().copied().cycle().take(MAX_REPLY + 1).collect::<Vec<u8>>();
        &long[..]
    } else {
        data
    };
    let mut sent = Vec::new();
    frames(id, reply, |d| sent.push(d.to_vec()));
    let mut body = Vec::new();
    for (i, d) in sent.iter().enumerate() {
        assert!(d.len() > HEADER && d.len() <= DATAGRAM);
        let f = Frame::parse(d).unwrap_or_default();
        assert_eq!((f.id, usize::from(f.seq), usize::from(f.total), f.reserved), (id, i, sent.len(), 0));
        body.extend_from_slice(&d[HEADER..]);
    }
    assert_eq!(body, if reply.len() > MAX_REPLY { UDP_TOO_LARGE } else { reply });
});
