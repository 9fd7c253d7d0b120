//! Buffers that connections borrow only while they have bytes in them.
//!
//! Most connections are idle most of the time; a read buffer and a reply
//! buffer apiece would cost every idle connection 32 KiB of address space
//! and the pages it touched (12.5 KB each, measured, against memcached's
//! 0.7 KB). So a connection takes a buffer from its worker's pool when bytes
//! arrive or a reply is written, and gives it back once the buffer is empty
//! again: an idle connection holds none. Each worker thread has its own pool
//! (a thread-local: no lock, and a buffer stays on the core that used it).
//! Pools are bounded; buffers past the bound are freed. Read buffers that
//! grew for one large request are kept for the next ones, up to
//! [`LARGE_KEEP_MAX`] bytes of them per worker: large values (scenario
//! 11's 400-600 KB sets) each took a fresh allocation, whose pages the
//! kernel faulted in and zeroed and the buffer's growth zeroed again.

use std::cell::RefCell;

/// The standard size of a pooled buffer.
pub(crate) const BUF_SIZE: usize = 16 * 1024;

/// Bytes of grown read buffers a worker keeps for the next large requests:
/// a few connections' values at memcached's default `-I` (1 MiB) at once;
/// at most this much per worker stays allocated while none comes.
pub(crate) const LARGE_KEEP_MAX: usize = 4 << 20;

/// Buffers of each kind a worker keeps for reuse: enough for the
/// connections one turn serves, 4 MiB of each kind per worker at most.
const POOL_MAX: usize = 256;

thread_local! {
    /// Read buffers: `len() == BUF_SIZE`, contents stale (initialised once).
    static READ: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Read buffers larger than `BUF_SIZE`, `LARGE_KEEP_MAX` bytes in all
    /// at most.
    static LARGE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Reply buffers: empty, `capacity() == BUF_SIZE`.
    static WRITE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Connections closed on this worker since its last trim.
    static CLOSED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Connections closed between two trims of the allocator's free memory.
const TRIM_EVERY: u32 = 1024;

/// Counts a closed connection; every [`TRIM_EVERY`] of them, hands the
/// allocator's free memory back to the kernel. Buffers freed in the middle
/// of the heap are otherwise kept by glibc for reuse: after 10,000
/// connections closed, their memory would stay resident.
pub(crate) fn note_closed() {
    let n = CLOSED.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    if n >= TRIM_EVERY {
        CLOSED.with(|c| c.set(0));
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory to the kernel.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// A read buffer of `BUF_SIZE` initialised bytes (their values are stale).
pub(crate) fn take_read() -> Vec<u8> {
    READ.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| vec![0; BUF_SIZE])
}

/// The smallest of the worker's grown read buffers with at least `len`
/// bytes, if it has one (initialised, stale).
pub(crate) fn take_large(len: usize) -> Option<Vec<u8>> {
    LARGE.with(|l| {
        let mut l = l.borrow_mut();
        let fit =
            (l.iter().enumerate()).filter(|(_, b)| b.len() >= len).min_by_key(|(_, b)| b.len()).map(|(i, _)| i)?;
        Some(l.swap_remove(fit))
    })
}

/// Gives a read buffer back. One larger than the standard size is kept
/// for later large requests while those kept come to at most
/// [`LARGE_KEEP_MAX`] bytes (smaller ones kept give way to it); any other
/// is freed.
pub(crate) fn give_read(b: Vec<u8>) {
    if b.len() > BUF_SIZE && b.len() <= LARGE_KEEP_MAX {
        LARGE.with(|l| {
            let mut l = l.borrow_mut();
            let mut kept: usize = l.iter().map(Vec::len).sum();
            while kept + b.len() > LARGE_KEEP_MAX {
                let Some((i, small)) = l.iter().enumerate().min_by_key(|(_, k)| k.len()) else { break };
                if small.len() >= b.len() {
                    return;
                }
                kept -= small.len();
                l.swap_remove(i);
            }
            l.push(b);
        });
        return;
    }
    if b.len() == BUF_SIZE {
        READ.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_MAX {
                p.push(b);
            }
        });
    }
}

/// An empty reply buffer with room for `BUF_SIZE` bytes.
pub(crate) fn take_write() -> Vec<u8> {
    WRITE.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| Vec::with_capacity(BUF_SIZE))
}

/// Gives a reply buffer back (emptied); one that grew is freed.
pub(crate) fn give_write(mut b: Vec<u8>) {
    if b.capacity() == BUF_SIZE {
        b.clear();
        WRITE.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_MAX {
                p.push(b);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_the_pool_is_bounded() {
        // Whatever an earlier test on this thread left.
        while take_large(0).is_some() {}
        let b = take_read();
        assert_eq!(b.len(), BUF_SIZE);
        let at = b.as_ptr();
        give_read(b);
        let again = take_read();
        assert_eq!(again.as_ptr(), at, "the same buffer again");
        drop(again);
        give_read(vec![0; BUF_SIZE * 2]);
        assert_eq!(READ.with(|p| p.borrow().len()), 0, "a grown buffer is not a standard one");
        let big = take_large(BUF_SIZE + 1).expect("a grown buffer is kept for the next large request");
        assert_eq!(big.len(), BUF_SIZE * 2);
        assert!(take_large(1).is_none(), "taken: none left");
        give_read(big);
        assert!(take_large(BUF_SIZE * 2 + 1).is_none(), "too small for this request");
        give_read(vec![0; BUF_SIZE * 3]);
        assert_eq!(take_large(BUF_SIZE + 1).map(|b| b.len()), Some(BUF_SIZE * 2), "the smallest that fits");
        assert_eq!(take_large(0).map(|b| b.len()), Some(BUF_SIZE * 3));
        give_read(vec![0; LARGE_KEEP_MAX + 1]);
        assert!(take_large(0).is_none(), "one past the bound is freed");
        // Bounded in bytes: the larger gives way to none, the smaller give
        // way to the larger.
        let quarter = LARGE_KEEP_MAX / 4;
        for _ in 0..4 {
            give_read(vec![0; quarter]);
        }
        give_read(vec![0; quarter]);
        give_read(vec![0; quarter * 2]);
        let mut kept: Vec<usize> = std::iter::from_fn(|| take_large(0).map(|b| b.len())).collect();
        kept.sort();
        assert_eq!(kept, [quarter, quarter, quarter * 2], "at most LARGE_KEEP_MAX bytes");
        for _ in 0..POOL_MAX + 10 {
            give_write(Vec::with_capacity(BUF_SIZE));
        }
        assert_eq!(WRITE.with(|p| p.borrow().len()), POOL_MAX);
        let mut w = take_write();
        assert!(w.is_empty() && w.capacity() == BUF_SIZE);
        w.extend_from_slice(b"abc");
        give_write(w);
        assert!(take_write().is_empty(), "given back emptied");
    }
}
