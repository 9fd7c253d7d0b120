//! memcached's UDP framing: the 8-byte header every datagram starts with,
//! and how a reply is cut into numbered datagrams. The socket and the
//! thread that serves it are the server's (`crates/server/src/udp.rs`).
//!
//! The header, four big-endian 16-bit words:
//!
//! ```text
//! 0      2        4         6          8
//! +------+--------+---------+----------+------------------------+
//! | id   | seq    | total   | reserved | requests (text, meta,  |
//! |      |        |         |          | binary), complete      |
//! +------+--------+---------+----------+------------------------+
//! ```
//!
//! `id` is the client's request id, echoed in every datagram of the reply;
//! `seq` numbers a reply's datagrams from 0 and `total` counts them;
//! `reserved` is 0 in replies and ignored in requests. A request must fit
//! one datagram (`total` 1, as memcached requires).
//!
//! A reply goes back in datagrams of at most [`DATAGRAM`] bytes. UDP lets
//! a spoofed source address aim the replies at someone else (memcached's
//! 2018 amplification attacks), so strata bounds a reply at
//! [`MAX_DATAGRAMS`] datagrams: a larger one is replaced by one
//! `SERVER_ERROR` line (memcached has no bound).

use crate::reply::text::UDP_TOO_LARGE;

/// The frame header's bytes.
pub const HEADER: usize = 8;

/// Largest datagram sent, header included (memcached's
/// `UDP_MAX_PAYLOAD_SIZE`).
pub const DATAGRAM: usize = 1400;

/// Reply bytes one datagram carries.
pub const PAYLOAD: usize = DATAGRAM - HEADER;

/// Most datagrams one request may be answered with.
pub const MAX_DATAGRAMS: usize = 64;

/// The longest reply sent as it is (about 87 KiB); a longer one becomes
/// [`UDP_TOO_LARGE`].
pub const MAX_REPLY: usize = MAX_DATAGRAMS * PAYLOAD;

/// A datagram's frame header, a field per header word, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Frame {
    pub id: u16,
    pub seq: u16,
    pub total: u16,
    pub reserved: u16,
}

impl Frame {
    /// The header at the front of `datagram`; `None` if it is shorter than
    /// a header.
    pub fn parse(datagram: &[u8]) -> Option<Frame> {
        let h: &[u8; HEADER] = datagram.get(..HEADER)?.try_into().ok()?;
        let word = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Some(Frame { id: word(0), seq: word(2), total: word(4), reserved: word(6) })
    }

    /// The header of a request datagram memcached serves: one that is the
    /// whole request (`total` 1), whatever its sequence number and
    /// reserved word say.
    pub fn request(datagram: &[u8]) -> Option<Frame> {
        Frame::parse(datagram).filter(|f| f.total == 1)
    }

    /// The header's bytes.
    pub fn bytes(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        for (i, w) in [self.id, self.seq, self.total, self.reserved].into_iter().enumerate() {
            h[2 * i..2 * i + 2].copy_from_slice(&w.to_be_bytes());
        }
        h
    }

    /// Appends the header.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes());
    }
}

/// Cuts `reply` into the datagrams that carry it for request `id`, header
/// and all, handing each to `send`; a reply over [`MAX_REPLY`] is sent as
/// [`UDP_TOO_LARGE`] instead.
pub fn frames(id: u16, reply: &[u8], mut send: impl FnMut(&[u8])) {
    let body = if reply.len() > MAX_REPLY { UDP_TOO_LARGE } else { reply };
    // At most MAX_DATAGRAMS chunks: the counts fit a u16.
    let total = u16::try_from(body.len().div_ceil(PAYLOAD)).unwrap_or(u16::MAX);
    let mut dgram = Vec::with_capacity(DATAGRAM);
    for (seq, chunk) in body.chunks(PAYLOAD).enumerate() {
        dgram.clear();
        Frame { id, seq: u16::try_from(seq).unwrap_or(u16::MAX), total, reserved: 0 }.write(&mut dgram);
        dgram.extend_from_slice(chunk);
        send(&dgram);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_header_is_four_words_in_wire_order() {
        assert_eq!(std::mem::size_of::<Frame>(), HEADER);
        let f = Frame { id: 0x0102, seq: 0x0304, total: 0x0506, reserved: 0x0708 };
        assert_eq!(f.bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
        let mut out = vec![0xff];
        f.write(&mut out);
        assert_eq!(out, [0xff, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn frame_headers_and_single_datagram_requests() {
        let f = Frame { id: 7, seq: 3, total: 1, reserved: 9 };
        assert_eq!(Frame::parse(&[0, 7, 0, 3, 0, 1, 0, 9, b'x']), Some(f));
        assert_eq!(Frame::request(&[0, 7, 0, 3, 0, 1, 0, 9, b'x']), Some(f));
        assert_eq!(Frame::request(&[0, 7, 0, 0, 0, 2, 0, 0]), None, "a request in two datagrams");
        assert_eq!(Frame::request(&[0, 7, 0, 0, 0, 0, 0, 0]), None, "a request in no datagram");
        assert_eq!(Frame::parse(&[0, 7, 0, 0, 0, 1, 0]), None, "short header");
    }

    #[test]
    fn replies_split_into_numbered_datagrams() {
        let reply = vec![b'v'; 3000];
        let mut got = Vec::new();
        frames(0x1234, &reply, |d| got.push(d.to_vec()));
        assert_eq!(got.len(), 3);
        for (i, d) in got.iter().enumerate() {
            assert!(d.len() <= DATAGRAM);
            assert_eq!(Frame::parse(d), Some(Frame { id: 0x1234, seq: i as u16, total: 3, reserved: 0 }));
        }
        assert_eq!(got.iter().map(|d| d.len() - HEADER).sum::<usize>(), 3000);
    }

    #[test]
    fn an_empty_reply_sends_nothing() {
        let mut got = 0;
        frames(1, b"", |_| got += 1);
        assert_eq!(got, 0);
    }

    #[test]
    fn a_reply_over_the_bound_becomes_one_error() {
        let mut got = Vec::new();
        frames(1, &vec![b'v'; MAX_REPLY], |d| got.push(d.len()));
        assert_eq!(got.len(), MAX_DATAGRAMS, "a reply at the bound goes out whole");
        let mut got = Vec::new();
        frames(1, &vec![b'v'; MAX_REPLY + 1], |d| got.push(d.to_vec()));
        assert_eq!(got, vec![[&[0, 1, 0, 0, 0, 1, 0, 0][..], UDP_TOO_LARGE].concat()]);
    }

    proptest! {
        #[test]
        fn parse_reads_back_what_write_wrote(id: u16, seq: u16, total: u16, reserved: u16, tail: Vec<u8>) {
            let f = Frame { id, seq, total, reserved };
            let mut d = Vec::new();
            f.write(&mut d);
            d.extend_from_slice(&tail);
            prop_assert_eq!(Frame::parse(&d), Some(f));
        }
    }
}
