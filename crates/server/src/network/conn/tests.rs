//! `Conn` driven through a fake transport that injects short reads and
//! writes, `EAGAIN`, resets and half-closes, on both drivers (epoll's
//! `service`, io_uring's `receive`/`advance`/`next_send`), against a real
//! store.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use proptest::prelude::*;
use strata_store::{Clock, Config, Reading, Store};

use super::*;
use crate::config::ServerConfig;
use crate::execution::dispatch::Ctx;
use crate::network::transport::Received;
use crate::observability::counters::WorkerStats;
use crate::Shared;

/// A real store and what a worker thread holds, for building a [`Ctx`].
/// (`sched_tests.rs` builds its connections on one too.)
pub(crate) struct Fixture {
    pub shared: Arc<Shared>,
    pub store: strata_store::Worker,
    pub stats: Arc<WorkerStats>,
    _poll: mio::Poll,
}

impl Fixture {
    pub fn new(cfg: ServerConfig) -> Fixture {
        let store_cfg = Config { memory_limit: 8 << 20, item_size_max: cfg.item_size_max, ..Config::default() };
        let store = Store::new(store_cfg, Arc::new(Clock::manual(1_700_000_000))).unwrap();
        let poll = mio::Poll::new().unwrap();
        let acceptor = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let shared = Arc::new(Shared::new(cfg, store.clone(), None, acceptor, &[], &[]));
        let stats = shared.workers[0].clone();
        Fixture { store: store.worker(), shared, stats, _poll: poll }
    }

    fn ctx(&mut self) -> Ctx<'_> {
        Ctx::for_loop(&self.shared, &mut self.store, &self.stats)
    }

    fn conn(&self) -> Conn {
        let info = ConnInfo::new(0, "test".into(), "test".into(), 0, self.shared.replies.clone());
        Conn::new(Arc::new(info))
    }
}

enum Rd {
    Bytes(Vec<u8>),
    WouldBlock,
    End,
    Reset,
}

enum Wr {
    /// Take at most this many bytes (a short write).
    Take(usize),
    WouldBlock,
    Reset,
}

/// Reads and writes as scripted; with the script used up, reads would
/// block and writes take everything.
#[derive(Default)]
struct Fake {
    reads: VecDeque<Rd>,
    writes: VecDeque<Wr>,
    out: Vec<u8>,
}

impl Fake {
    fn with_input(chunks: &[&[u8]]) -> Fake {
        Fake { reads: chunks.iter().map(|c| Rd::Bytes(c.to_vec())).collect(), ..Fake::default() }
    }
}

impl Transport for Fake {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.reads.pop_front() {
            None | Some(Rd::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Some(Rd::End) => {
                // The end of input stays the end.
                self.reads.push_front(Rd::End);
                Ok(0)
            }
            Some(Rd::Reset) => Err(io::ErrorKind::ConnectionReset.into()),
            Some(Rd::Bytes(mut b)) => {
                let n = b.len().min(buf.len());
                buf[..n].copy_from_slice(&b[..n]);
                if n < b.len() {
                    self.reads.push_front(Rd::Bytes(b.split_off(n)));
                }
                Ok(n)
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.writes.pop_front() {
            None => {
                self.out.extend_from_slice(buf);
                Ok(buf.len())
            }
            Some(Wr::Take(n)) => {
                let n = n.min(buf.len());
                self.out.extend_from_slice(&buf[..n]);
                Ok(n)
            }
            Some(Wr::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Some(Wr::Reset) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
}

/// What a pass that leaves the connection open hands the scheduler when
/// it neither waits for the log, nor parks, nor watches.
fn open(more: bool) -> Effects {
    Effects { more, ..Effects::default() }
}

/// Services the connection the way the epoll loop does — once per
/// readiness, again while it has work left — until it closes or nothing is
/// left to happen.
fn drive(conn: &mut Conn, t: &mut Fake, f: &mut Fixture) -> Status {
    for _ in 0..10_000 {
        let status = conn.service(t, &mut f.ctx());
        let idle = t.reads.iter().all(|r| matches!(r, Rd::End)) && conn.replies.pending() == 0;
        match status {
            Status::Close => return Status::Close,
            Status::Open(Effects { more: false, .. }) if idle => return status,
            Status::Open(_) => {}
        }
    }
    panic!("the connection never settled");
}

/// A pipeline touching every kind of reply: storage, hits, misses,
/// multi-get, counters, meta with flags, a refused value, binary-free.
const PIPELINE: &[u8] = b"set a 0 0 5\r\nhello\r\nget a b\r\nadd a 0 0 1\r\nx\r\nincr n 1\r\nset n 0 0 1\r\n7\r\n\
incr n 5\r\nms m 3 T0 F9\r\nabc\r\nmg m v f s k\r\nmn\r\nset big 0 0 70000\r\n";

fn pipeline() -> Vec<u8> {
    let mut p = PIPELINE.to_vec();
    p.extend_from_slice(&[b'z'; 70000]);
    p.extend_from_slice(b"\r\ngets a\r\ndelete a\r\nget a\r\nbogus\r\nmg m q\r\nmn\r\n");
    p
}

const EXPECTED: &[u8] = b"STORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\nNOT_STORED\r\nNOT_FOUND\r\nSTORED\r\n12\r\nHD\r\n\
VA 3 f9 s3 km\r\nabc\r\nMN\r\nSERVER_ERROR object too large for cache\r\n";

fn check_expected(out: &[u8]) {
    assert!(out.starts_with(EXPECTED), "{}", String::from_utf8_lossy(out));
    let rest = &out[EXPECTED.len()..];
    let rest = String::from_utf8_lossy(rest);
    let tail = "END\r\nDELETED\r\nEND\r\nERROR\r\nHD\r\nMN\r\n";
    assert!(rest.starts_with("VALUE a 0 5 ") && rest.ends_with(tail), "{rest}");
}

fn small_config() -> ServerConfig {
    ServerConfig { item_size_max: 64 << 10, ..ServerConfig::default() }
}

#[test]
fn one_read_one_write() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[&pipeline()]);
    assert_eq!(drive(&mut conn, &mut t, &mut f), Status::Open(open(false)));
    check_expected(&t.out);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// However the input is cut into reads, with `EAGAIN` between them, and
    /// however writes are cut short or refused, the client receives the
    /// same bytes in the same order.
    #[test]
    fn any_cut_of_reads_and_writes_gives_the_same_replies(
        cuts in proptest::collection::vec(1usize..9000, 1..40),
        writes in proptest::collection::vec(prop_oneof![Just(0usize), 1usize..50, 50usize..5000], 0..60),
    ) {
        let input = pipeline();
        let mut f = Fixture::new(small_config());
        let mut conn = f.conn();
        let mut t = Fake::default();
        let mut at = 0;
        for c in cuts {
            if at == input.len() {
                break;
            }
            let end = (at + c).min(input.len());
            t.reads.push_back(Rd::Bytes(input[at..end].to_vec()));
            t.reads.push_back(Rd::WouldBlock);
            at = end;
        }
        if at < input.len() {
            // (An empty read is the end of input, as on a socket.)
            t.reads.push_back(Rd::Bytes(input[at..].to_vec()));
        }
        t.writes = writes.into_iter().map(|n| if n == 0 { Wr::WouldBlock } else { Wr::Take(n) }).collect();
        prop_assert_eq!(drive(&mut conn, &mut t, &mut f), Status::Open(open(false)));
        check_expected(&t.out);
    }

    /// The io_uring driver: receives of any size, sends cut short.
    #[test]
    fn the_ring_driver_gives_the_same_replies(
        cuts in proptest::collection::vec(1usize..9000, 1..40),
        sends in proptest::collection::vec(1usize..3000, 1..40),
    ) {
        let input = pipeline();
        let mut f = Fixture::new(small_config());
        let mut conn = f.conn();
        let mut out = Vec::new();
        let mut sends = sends.into_iter().cycle();
        let mut at = 0;
        let mut cuts = cuts.into_iter().cycle();
        for _ in 0..100_000 {
            if at < input.len() {
                let end = (at + cuts.next().unwrap_or(1)).min(input.len());
                conn.receive(&mut Received::Bytes(&input[at..end]));
                at = end;
            }
            let adv = conn.advance(&mut f.ctx());
            prop_assert!(adv != Advance::Close);
            if let Some(buf) = conn.next_send() {
                let n = buf.len().min(sends.next().unwrap_or(1));
                out.extend_from_slice(&buf[..n]);
                conn.sent(n);
            }
            if at == input.len() && conn.next_send().is_none() && adv == (Advance::Open { effects: open(false), read: true, backlogged: false }) {
                break;
            }
        }
        check_expected(&out);
    }
}

#[test]
fn a_reset_closes_on_read_and_on_write() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let mut t = Fake { reads: [Rd::Reset].into(), ..Fake::default() };
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Close);

    let mut conn = f.conn();
    let mut t = Fake::with_input(&[b"get a\r\n"]);
    t.writes = [Wr::Reset].into();
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Close);
}

#[test]
fn a_half_closed_client_gets_every_complete_reply_then_the_close() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[b"set b 0 0 1\r\nx\r\nget b\r\nget c"]);
    t.reads.push_back(Rd::End);
    // The socket takes nothing for a while (a pass tries to write at its
    // start and at its end): the close waits for the replies.
    t.writes = [Wr::WouldBlock, Wr::WouldBlock, Wr::WouldBlock].into();
    conn.note_peer_closed();
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Open(open(false)));
    assert!(t.out.is_empty());
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Open(open(false)), "still not written");
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Close);
    assert_eq!(t.out, b"STORED\r\nVALUE b 0 1\r\nx\r\nEND\r\n", "the partial `get c` is never answered");
}

#[test]
fn quit_answers_what_came_before_and_runs_nothing_after() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[b"get a\r\nquit\r\nget b\r\nset c 0 0 1\r\nx\r\n"]);
    assert_eq!(drive(&mut conn, &mut t, &mut f), Status::Close);
    assert_eq!(t.out, b"END\r\n");
    assert_eq!(f.stats.cmd_get.load(Relaxed), 1);
    assert_eq!(f.stats.cmd_set.load(Relaxed), 0);
}

#[test]
fn a_multi_get_over_the_reply_limit_pauses_and_resumes_in_order() {
    let cfg = ServerConfig { max_output: 8 << 10, ..small_config() };
    let mut f = Fixture::new(cfg);
    let value = vec![b'v'; 1000];
    let mut keys = Vec::new();
    for i in 0..40 {
        let k = format!("key{i}");
        let w = strata_store::Write::new(strata_store::SetOp::Set, k.as_bytes(), 0, 0, &value);
        assert!(matches!(f.store.set_with(&w, Reading::Now), Ok(strata_store::Flow::Ready(_))));
        keys.push(k);
    }
    let request = format!("get {}\r\nmn\r\n", keys.join(" "));
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[request.as_bytes()]);
    t.writes = [Wr::WouldBlock].into();
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Open(open(false)));
    let held = conn.replies.pending();
    assert!((8 << 10..(8 << 10) + 2000).contains(&held), "stopped at the limit: {held}");
    assert_eq!(drive(&mut conn, &mut t, &mut f), Status::Open(open(false)));
    let mut want = Vec::new();
    for k in &keys {
        want.extend_from_slice(format!("VALUE {k} 0 1000\r\n").as_bytes());
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\n");
    }
    want.extend_from_slice(b"END\r\nMN\r\n");
    assert!(t.out == want, "{} bytes, want {}", t.out.len(), want.len());
}

#[test]
fn a_reply_slot_holds_later_replies_until_it_is_filled() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[b"mn\r\n"]);
    conn.service(&mut t, &mut f.ctx());
    // A reply that waits (as a flash read will), then later requests.
    let slot = conn.replies.wait();
    t.reads.push_back(Rd::Bytes(b"get x\r\nmn\r\n".to_vec()));
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Open(open(false)));
    assert_eq!(t.out, b"MN\r\n", "nothing behind the slot leaves");
    assert_eq!(f.stats.cmd_get.load(Relaxed), 1, "but the requests behind it ran");
    assert!(conn.replies.fill(slot, b"VALUE w 0 1\r\n1\r\nEND\r\n"));
    conn.service(&mut t, &mut f.ctx());
    assert_eq!(t.out, b"MN\r\nVALUE w 0 1\r\n1\r\nEND\r\nEND\r\nMN\r\n");
}

#[test]
fn too_many_waiting_replies_stop_the_parsing() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let slots: Vec<_> = (0..MAX_WAITING_REPLIES).map(|_| conn.replies.wait()).collect();
    let mut t = Fake::with_input(&[b"mn\r\nmn\r\n"]);
    assert_eq!(conn.service(&mut t, &mut f.ctx()), Status::Open(open(true)), "stalled, come back");
    assert_eq!(conn.replies.pending(), 0, "nothing parsed");
    for s in slots {
        conn.replies.fill(s, b"");
    }
    assert_eq!(drive(&mut conn, &mut t, &mut f), Status::Open(open(false)));
    assert_eq!(t.out, b"MN\r\nMN\r\n");
}

#[test]
fn a_refused_value_is_swallowed_across_reads() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let big = vec![b'q'; 100_000];
    let mut t = Fake::with_input(&[b"set k 0 0 100000\r\n", &big[..30_000], &big[30_000..], b"\r\nget k\r\n"]);
    assert_eq!(drive(&mut conn, &mut t, &mut f), Status::Open(open(false)));
    assert_eq!(t.out, b"SERVER_ERROR object too large for cache\r\nEND\r\n");
    assert_eq!(conn.state(), ConnState::ParseCmd);
}

#[test]
fn stats_conns_sees_the_state() {
    let mut f = Fixture::new(small_config());
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[b"set k 0 0 100000\r\n", b"qqq"]);
    conn.service(&mut t, &mut f.ctx());
    assert_eq!(conn.state(), ConnState::Swallow);
    let mut conn = f.conn();
    let mut t = Fake::with_input(&[b"set k 0 0 10\r\nab"]);
    conn.service(&mut t, &mut f.ctx());
    assert_eq!((conn.state(), conn.stuck()), (ConnState::Nread, true));
    assert_eq!(conn.info.state.load(Relaxed), ConnState::Nread as u32);
}

/// The server's life only moves forward: a drain asked for while stopping
/// does not bring it back to draining.
#[test]
fn run_state_moves_forward_only() {
    use crate::{Run, RunState};
    let r = RunState::default();
    assert_eq!(r.get(), Run::Serving);
    r.drain();
    assert!(r.draining() && !r.stopping());
    r.drain();
    assert_eq!(r.get(), Run::Draining);
    r.stop();
    assert!(r.stopping() && !r.draining());
    r.drain();
    assert_eq!(r.get(), Run::Stopping);
}

#[test]
fn a_large_value_arriving_in_many_receives_grows_the_buffer_once() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut conn = f.conn();
    let value = vec![b'v'; 600_000];
    let mut input = b"set big 0 0 600000\r\n".to_vec();
    input.extend_from_slice(&value);
    input.extend_from_slice(b"\r\n");
    let mut grown = Vec::new();
    for round in 0..2 {
        // 64 KiB receives, as a socket hands a large value over; the
        // request is parsed (and found incomplete) after each.
        for chunk in input.chunks(64 << 10) {
            conn.receive(&mut Received::Bytes(chunk));
            grown.push((round, conn.rbuf.as_ptr() as usize, conn.rbuf.len()));
            let _ = conn.advance(&mut f.ctx());
        }
        let mut out = Vec::new();
        while let Some(s) = conn.next_send() {
            out.extend_from_slice(s);
            let n = s.len();
            conn.sent(n);
        }
        assert_eq!(out, b"STORED\r\n", "round {round}");
    }
    // The first receive brings the command line: the buffer is the pool's
    // standard one. From the second on it is one buffer with room for the
    // whole request; the next large request takes the same one back.
    let whole = input.len();
    let large: Vec<_> = grown.iter().filter(|g| g.2 >= whole).collect();
    assert_eq!(large.len(), grown.len() - 1, "all but the first receive: {grown:?}");
    assert!(large.iter().all(|g| g.1 == large[0].1), "one buffer, reused: {grown:?}");
    let got = f.store.read(b"big", &strata_store::ReadOpts::GET, |it| it.value.len()).unwrap();
    assert_eq!(got, Some(600_000));
}

#[test]
fn the_rest_of_a_large_value_is_received_in_place() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut conn = f.conn();
    let value: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut input = b"set big 0 0 300000\r\n".to_vec();
    input.extend_from_slice(&value);
    input.extend_from_slice(b"\r\nget big\r\n");
    let head = 20 + 8_000;
    assert!(!conn.wants_rest(1), "nothing buffered: nothing to lend");
    conn.receive(&mut Received::Bytes(&input[..head]));
    let _ = conn.advance(&mut f.ctx());
    assert!(conn.wants_rest(64 << 10));
    assert!(!conn.wants_rest(300_000), "less than that is left");
    let (ptr, len) = conn.lend_rest(64 << 10).expect("lent");
    assert_eq!(len as usize, 300_000 + 2 - 8_000, "exactly the rest of the request");
    assert!(conn.lent() && conn.lend_rest(1).is_none(), "lent once");
    // The receive writes part of the rest in place (as the kernel does),
    // comes back, and is lent again for what is left.
    let part = 100_000;
    // SAFETY: the test stands for the kernel: `ptr` is valid for `len`
    // bytes lent by lend_rest, and nothing else touches them until returned.
    unsafe { std::ptr::copy_nonoverlapping(input[head..head + part].as_ptr(), ptr, part) };
    conn.returned(part);
    assert!(!conn.lent());
    let _ = conn.advance(&mut f.ctx());
    let (ptr, len) = conn.lend_rest(64 << 10).expect("lent again");
    let rest = 20 + 300_002 - head - part;
    assert_eq!(len as usize, rest);
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(input[head + part..head + part + rest].as_ptr(), ptr, rest) };
    conn.returned(rest);
    conn.receive(&mut Received::Bytes(&input[20 + 300_002..]));
    // A large value's reply is written in parts, one advance each.
    let mut out = Vec::new();
    for _ in 0..10 {
        let _ = conn.advance(&mut f.ctx());
        while let Some(s) = conn.next_send() {
            out.extend_from_slice(s);
            let n = s.len();
            conn.sent(n);
        }
    }
    let mut want = b"STORED\r\nVALUE big 0 300000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert!(
        out == want,
        "{} bytes back, want {}: {:?} ... {:?}",
        out.len(),
        want.len(),
        String::from_utf8_lossy(&out[..40.min(out.len())]),
        String::from_utf8_lossy(&out[out.len().saturating_sub(20)..])
    );
}
