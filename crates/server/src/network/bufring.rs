//! The provided-buffer ring an io_uring worker's receives land in.
//!
//! A multishot receive stays armed on its socket and, for every arrival,
//! takes a buffer from this ring, fills it and names it in the completion
//! (`IORING_REGISTER_PBUF_RING`, Linux 5.19). The worker copies the bytes
//! into the connection's read buffer and hands the buffer straight back, so
//! the ring is a small per-worker pool, not a buffer per connection.
//!
//! Layout: `entries` descriptors of 16 bytes in one page-aligned block that
//! the kernel reads (the tail lives in the first descriptor's reserved
//! field), and `entries × size` bytes of buffer memory the kernel writes.
//!
//! ```text
//! ring: | addr u64 | len u32 | bid u16 | resv/tail u16 |  × entries
//! mem:  | buffer 0 (size) | buffer 1 | ... | buffer entries-1 |
//! ```

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering::Release};

use io_uring::types::BufRingEntry;
use io_uring::Submitter;

pub(crate) struct BufRing {
    ring: NonNull<BufRingEntry>,
    layout: Layout,
    mem: Box<[u8]>,
    entries: u16,
    size: usize,
    /// Our copy of the tail: descriptors published so far.
    tail: u16,
}

impl BufRing {
    /// Allocates `entries` (a power of two) buffers of `size` bytes and
    /// registers them as buffer group `bgid`.
    pub fn new(submitter: &Submitter<'_>, entries: u16, size: usize, bgid: u16) -> io::Result<BufRing> {
        if !entries.is_power_of_two() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer ring size must be a power of two"));
        }
        let bytes = entries as usize * std::mem::size_of::<BufRingEntry>();
        let layout = Layout::from_size_align(bytes.max(4096), 4096).map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let ring = NonNull::new(unsafe { alloc_zeroed(layout) }.cast::<BufRingEntry>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let mut br = BufRing {
            ring,
            layout,
            mem: vec![0u8; entries as usize * size].into_boxed_slice(),
            entries,
            size,
            tail: 0,
        };
        // SAFETY: the ring is page aligned, zeroed and `entries` long, and
        // outlives its registration (unregistered in `Drop`, before it is
        // freed, by the worker that owns both).
        unsafe { submitter.register_buf_ring_with_flags(ring.as_ptr() as u64, entries, bgid, 0)? };
        for bid in 0..entries {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    /// The first `len` bytes of buffer `bid`, as a completion named them.
    pub fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let start = (bid as usize % self.entries as usize) * self.size;
        &self.mem[start..start + len.min(self.size)]
    }

    /// Returns buffer `bid` to the kernel.
    pub fn give_back(&mut self, bid: u16) {
        self.push(bid);
        self.publish();
    }

    fn push(&mut self, bid: u16) {
        let bid = bid % self.entries;
        let slot = (self.tail & (self.entries - 1)) as usize;
        // SAFETY: `slot` < entries, inside the allocation; the kernel reads
        // descriptors only up to the published tail, and this one is past it.
        let e = unsafe { &mut *self.ring.as_ptr().add(slot) };
        e.set_addr(self.mem.as_ptr() as u64 + (bid as usize * self.size) as u64);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail is the reserved field of the first descriptor, a
        // naturally aligned u16 the kernel reads with acquire ordering.
        let tail = unsafe { &*BufRingEntry::tail(self.ring.as_ptr()).cast::<AtomicU16>() };
        tail.store(self.tail, Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout. The ring's kernel side
        // is gone or unregistered by now (see `uring::Loop::drop`).
        unsafe { dealloc(self.ring.as_ptr().cast(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use io_uring::{cqueue, opcode, types, IoUring};

    use super::*;

    type Res = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn descriptor_layout_is_the_kernels() {
        // struct io_uring_buf: addr u64, len u32, bid u16, resv u16.
        assert_eq!(std::mem::size_of::<BufRingEntry>(), 16);
    }

    /// A ring here, or None where the kernel refuses io_uring (the server
    /// then runs on epoll, which the wire suite covers as well).
    fn ring() -> Option<IoUring> {
        match IoUring::new(8) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("io_uring unavailable here ({e}); skipping");
                None
            }
        }
    }

    fn tail(br: &BufRing) -> u16 {
        // SAFETY: the published tail of a ring `br` allocated and owns.
        unsafe { *BufRingEntry::tail(br.ring.as_ptr()) }
    }

    #[test]
    fn registers_every_buffer_and_hands_back_in_ring_order() -> Res {
        let Some(ring) = ring() else { return Ok(()) };
        let mut br = BufRing::new(&ring.submitter(), 4, 64, 7)?;
        assert_eq!(tail(&br), 4);
        br.give_back(2);
        assert_eq!(tail(&br), 5);
        // The fifth descriptor wraps to slot 0 and names buffer 2.
        // SAFETY: slot 0 of the 4-entry ring `br` owns.
        let e = unsafe { &*br.ring.as_ptr() };
        assert_eq!(e.bid(), 2);
        assert_eq!(e.addr(), br.mem.as_ptr() as u64 + 2 * 64);
        assert_eq!(e.len(), 64);
        ring.submitter().unregister_buf_ring(7)?;
        Ok(())
    }

    #[test]
    fn multishot_receive_lands_in_a_ring_buffer() -> Res {
        let Some(mut ring) = ring() else { return Ok(()) };
        let br = BufRing::new(&ring.submitter(), 4, 64, 3)?;
        let (mut a, b) = UnixStream::pair()?;
        let recv = opcode::RecvMulti::new(types::Fd(b.as_raw_fd()), 3).build().user_data(9);
        // SAFETY: the receive writes only into `br`'s buffers, which outlive
        // the ring's use of them (unregistered below, before `br` drops).
        unsafe { ring.submission().push(&recv)? };
        a.write_all(b"hello")?;
        ring.submit_and_wait(1)?;
        let cqe = ring.completion().next().ok_or("no completion")?;
        assert_eq!(cqe.user_data(), 9);
        assert_eq!(cqe.result(), 5);
        assert!(cqueue::more(cqe.flags()), "multishot stays armed");
        let bid = cqueue::buffer_select(cqe.flags()).ok_or("no ring buffer named")?;
        assert_eq!(br.bytes(bid, 5), b"hello");
        drop(a);
        ring.submit_and_wait(1)?;
        let end = ring.completion().next().ok_or("no end-of-input completion")?;
        assert_eq!(end.result(), 0);
        assert!(!cqueue::more(end.flags()));
        ring.submitter().unregister_buf_ring(3)?;
        Ok(())
    }
}
