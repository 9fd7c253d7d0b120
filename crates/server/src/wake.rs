//! The eventfd that wakes a worker's event loop from another thread (new
//! connections, a stop, a snapshot's seal request, a `watch` line waiting):
//! a primitive below every layer, so that whoever wakes a worker need not
//! import the loop.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Wakes a worker to take new connections or to stop: an eventfd that the
/// epoll loop watches and the io_uring loop keeps a read queued on.
pub(crate) struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an fd we own. A full
        // counter (EAGAIN) means a wake-up is already pending.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter, so the next `wake` is a new edge.
    pub fn drain(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64.
        unsafe { libc::read(self.fd(), (&mut n as *mut u64).cast(), 8) };
    }
}
