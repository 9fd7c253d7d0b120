//! Completions, each handed to its connection: a receive's bytes (from a
//! ring buffer, or already in the connection's lent read buffer), the end
//! of input, a send's progress, the wake-up. A failed one closes its
//! connection unless it is closing already.

use io_uring::cqueue;

use super::{Completed, Cqe, Life, Loop, Recv, OP_BITS, OP_RECV, OP_SEND, OP_WAKE};
use crate::network::transport::Received;

impl Loop<'_> {
    /// Hands one completion to its connection.
    pub(super) fn complete(&mut self, (ud, res, flags): Cqe) -> Completed {
        let i = (ud >> OP_BITS) as usize;
        let serve = match ud & ((1 << OP_BITS) - 1) {
            OP_RECV => self.received(i, res, flags),
            OP_SEND => self.sent(i, res),
            OP_WAKE => {
                self.wake_armed = false;
                return Completed::Wake;
            }
            _ => false,
        };
        if serve {
            Completed::Serve(i)
        } else {
            Completed::Nothing
        }
    }

    /// A receive completion: bytes (in a ring buffer), end of input, or the
    /// end of the multishot receive. True if the connection is to be served.
    fn received(&mut self, i: usize, res: i32, flags: u32) -> bool {
        let bid = cqueue::buffer_select(flags);
        let Some(Some(s)) = self.slots.get_mut(i) else {
            if let Some(bid) = bid {
                self.bufs.give_back(bid);
            }
            return false;
        };
        if !cqueue::more(flags) {
            s.recv = Recv::Idle;
        }
        let closing = s.life == Life::Closing;
        if s.conn.lent() {
            // A direct receive (the only one in flight while the
            // connection's buffer is lent): its bytes are in that buffer
            // already; a cancelled or failed one wrote none, or some, kept.
            s.conn.returned(usize::try_from(res).unwrap_or(0));
            let failed = match res {
                0 => {
                    s.conn.receive(&mut Received::End);
                    false
                }
                n if n > 0 => false,
                n => !(n == -libc::ECANCELED || n == -libc::EINTR || n == -libc::EAGAIN),
            };
            if failed && !closing {
                self.close(i);
                return false;
            }
            return true;
        }
        let failed = match res {
            n if n > 0 => match bid {
                Some(bid) if !closing => {
                    let bytes = self.bufs.bytes(bid, n as usize);
                    match (&mut s.tls, &self.shared.tls) {
                        (Some(t), Some(server)) => t.received(bytes, &mut s.conn, &server.handshake_errors).is_err(),
                        _ => {
                            s.conn.receive(&mut Received::Bytes(bytes));
                            false
                        }
                    }
                }
                _ => false,
            },
            0 => {
                if let Some(t) = &mut s.tls {
                    t.drain(&mut s.conn);
                }
                s.conn.receive(&mut Received::End);
                false
            }
            // Out of ring buffers, cancelled on purpose, or interrupted:
            // `serve` re-arms it if the connection still wants input.
            n if n == -libc::ENOBUFS || n == -libc::ECANCELED || n == -libc::EINTR || n == -libc::EAGAIN => false,
            _ => true,
        };
        if let Some(bid) = bid {
            self.bufs.give_back(bid);
        }
        if failed && !closing {
            self.close(i);
            return false;
        }
        true
    }

    /// A send completion. True if the connection is to be served.
    fn sent(&mut self, i: usize, res: i32) -> bool {
        let Some(Some(s)) = self.slots.get_mut(i) else { return false };
        s.send = false;
        let failed = match res {
            // A send that took nothing of a non-empty buffer: the socket is
            // gone (the plain path's WriteZero).
            0 => true,
            n if n > 0 => {
                match &mut s.tls {
                    Some(t) => t.sent(n as usize),
                    None => s.conn.sent(n as usize),
                }
                false
            }
            n if n == -libc::EINTR || n == -libc::EAGAIN => false,
            _ => true,
        };
        if failed && s.life != Life::Closing {
            self.close(i);
            return false;
        }
        true
    }
}
