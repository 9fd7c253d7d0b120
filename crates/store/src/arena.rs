//! The memory all segments live in: one zeroed allocation of
//! `segments × segment_size` bytes, reserved up front so item memory can never
//! exceed `-m`. Pages are only backed by RAM once written, so an empty cache
//! has a small RSS, and a segment taken out of use is handed back to the
//! kernel ([`Arena::release`]) so RSS follows the segments in use.
//!
//! Segments are written and read by different threads at once, so the arena
//! hands out raw views and the store upholds the rules that make them sound:
//!
//! 1. A byte range is written only by the thread that reserved it in a segment
//!    it owns (a worker's active segment, or the eviction target), before the
//!    item is linked into the index.
//! 2. Linking and reading a linked item happen under the item's bucket lock,
//!    so a reader sees the writer's bytes (the lock's release/acquire).
//! 3. A segment is reused only after every item in it has been unlinked under
//!    its bucket lock, so no reader can still be looking at it.
//! 4. The only in-place changes to a published item are its expiry field,
//!    its state byte and, for an overwrite of the same layout
//!    (`overwrite.rs`), all its fields and its value, made under the bucket
//!    lock; lock-free readers (the scanner) never read them. An overwrite
//!    goes in place only where nobody reads the value without the lock (rule
//!    5's readers, the recompression pass) and no copy of the item waits to
//!    be linked in its place (a batch for flash).
//! 5. A segment with pins is not reused: whoever clears it waits for the
//!    pins to drop first. A reader that pinned it after finding an item
//!    linked there under its bucket lock may read that item's key and value
//!    without the lock until it unpins (never its expiry or state: rule 4);
//!    such values (`unlocked_read_min` bytes or more, compressed) are never
//!    overwritten in place.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use crate::item::{Header, Item};
use crate::types::ConfigError;

pub struct Arena {
    base: NonNull<u8>,
    layout: Layout,
    seg_size: usize,
    nsegs: u32,
}

// SAFETY: the arena is a plain byte buffer; the access rules in the module
// doc (ownership of reserved ranges, bucket locks for published items) are
// what make concurrent use sound, and every access goes through the unsafe
// methods below whose callers uphold them.
unsafe impl Send for Arena {}
// SAFETY: see `Send` above.
unsafe impl Sync for Arena {}

impl Arena {
    pub fn new(seg_size: usize, nsegs: u32) -> Result<Arena, ConfigError> {
        let size = seg_size
            .checked_mul(nsegs as usize)
            .filter(|&s| s > 0)
            .ok_or(ConfigError::Invalid("memory limit too small for one segment"))?;
        // Alignment 16 keeps this a plain calloc, which maps fresh zero pages
        // lazily; a larger alignment makes the allocator memset everything,
        // putting the whole limit in RSS at start.
        let layout = Layout::from_size_align(size, 16).map_err(|_| ConfigError::Invalid("memory limit too large"))?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        let base = NonNull::new(ptr).ok_or(ConfigError::Invalid("cannot reserve the memory limit"))?;
        Ok(Arena { base, layout, seg_size, nsegs })
    }

    pub fn segment_size(&self) -> usize {
        self.seg_size
    }

    /// Asks the kernel to back the arena with transparent huge pages
    /// (memcached's `-L`): fewer TLB misses for a large cache.
    pub fn advise_huge_pages(&self) -> std::io::Result<()> {
        if cfg!(miri) {
            return Ok(());
        }
        let page = 2 << 20;
        let start = (self.base.as_ptr() as usize).next_multiple_of(page);
        let end = (self.base.as_ptr() as usize + self.layout.size()) / page * page;
        if end <= start {
            return Ok(());
        }
        // SAFETY: the range lies inside this allocation; MADV_HUGEPAGE
        // changes how pages are backed, never their contents.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Backs segments `lo..=hi` with transparent huge pages (`on`), or
    /// stops doing so for pages faulted from now on (`!on`; those already
    /// huge stay so). For a bulk restore: faulting in 5 GB took 10.4 s in
    /// 4 KiB pages and 4.5 s in 2 MiB ones on the benchmark machine (a
    /// virtual one, where each first touch costs the host a fault too).
    /// Only where the system leaves huge pages to `madvise` (the default):
    /// with `always` the pages are huge already, and `-L` asks for the
    /// whole arena itself. Best effort: an error changes nothing.
    pub fn advise_huge_range(&self, lo: u32, hi: u32, on: bool) {
        if cfg!(miri) || lo > hi || hi >= self.nsegs || !thp_on_madvise() {
            return;
        }
        let page = 4096;
        let start = (self.ptr(lo, 0, 0) as usize).next_multiple_of(page);
        let end = (self.ptr(hi, 0, 0) as usize + self.seg_size) / page * page;
        if end <= start {
            return;
        }
        let advice = if on { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: [start, end) is page-aligned and inside this allocation;
        // these advices change how pages are backed, never their contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
    }

    fn ptr(&self, seg: u32, off: usize, len: usize) -> *mut u8 {
        // A bad location is a bug in the store; refusing it keeps it from
        // becoming memory corruption.
        assert!(seg < self.nsegs && off <= self.seg_size && len <= self.seg_size - off, "arena bounds");
        // SAFETY: the assert keeps the offset inside the allocation.
        unsafe { self.base.as_ptr().add(seg as usize * self.seg_size + off) }
    }

    /// # Safety
    /// Nobody writes `[off, off+len)` of `seg` while the slice lives (rules 1-4).
    pub unsafe fn bytes(&self, seg: u32, off: usize, len: usize) -> &[u8] {
        // SAFETY: in bounds (checked by `ptr`); no concurrent writer per the caller.
        unsafe { std::slice::from_raw_parts(self.ptr(seg, off, len), len) }
    }

    /// # Safety
    /// The caller owns `[off, off+len)` of `seg` exclusively (rule 1).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, seg: u32, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: in bounds (checked by `ptr`); exclusive per the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(seg, off, len), len) }
    }

    /// Starts loading the first cache line of the item at `off` of `seg`.
    /// Safe with any location: nothing is read, and the address is only
    /// computed (wrapping), never dereferenced.
    pub fn prefetch(&self, seg: u32, off: usize) {
        let at = (seg as usize).wrapping_mul(self.seg_size).wrapping_add(off);
        crate::index::prefetch(self.base.as_ptr().wrapping_add(at));
    }

    /// Gives the pages of `seg` back to the kernel; they read as zeros after.
    /// Only the whole pages inside the segment are released.
    ///
    /// # Safety
    /// The caller owns `seg` exclusively and nothing links into it (rule 3).
    pub unsafe fn release(&self, seg: u32) {
        if cfg!(miri) {
            // Miri has no madvise; zeroing keeps what callers see the same
            // (`write_bytes`, which Miri runs as one step, not a byte loop).
            // SAFETY: in bounds (checked by `ptr`); the caller owns the
            // segment exclusively.
            unsafe { std::ptr::write_bytes(self.ptr(seg, 0, self.seg_size), 0, self.seg_size) };
            return;
        }
        if let Some((lo, hi)) = self.whole_pages(seg) {
            // SAFETY: [lo, hi) is page-aligned and inside this segment, which
            // is part of our private anonymous allocation (the allocator keeps
            // no metadata inside it) and owned by the caller; MADV_DONTNEED
            // only drops its contents, which nobody reads any more.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
        }
    }

    /// The whole pages inside segment `seg`, as an address range.
    fn whole_pages(&self, seg: u32) -> Option<(usize, usize)> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let start = self.ptr(seg, 0, self.seg_size) as usize;
        let (lo, hi) = (start.next_multiple_of(page), (start + self.seg_size) / page * page);
        (hi > lo).then_some((lo, hi))
    }

    /// Faults in the pages of segment `seg` ahead of a bulk write into it
    /// (a restore), so that the kernel's zeroing of fresh pages happens on
    /// the calling thread rather than on each first touch of the writer's.
    /// Best effort: an older kernel without `MADV_POPULATE_WRITE` does
    /// nothing, and the writer faults the pages in itself.
    pub fn populate(&self, seg: u32) {
        if cfg!(miri) {
            return;
        }
        if let Some((lo, hi)) = self.whole_pages(seg) {
            // SAFETY: [lo, hi) is page-aligned and inside this segment of our
            // private anonymous allocation. MADV_POPULATE_WRITE only maps its
            // pages writable as a write fault would, changing no byte, so it
            // is sound whoever reads or writes the segment meanwhile.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_POPULATE_WRITE) };
        }
    }

    /// Reads the length prefix of the item at `off`, touching no other byte.
    /// `None` if it would run past `end`.
    ///
    /// # Safety
    /// An item was fully written at `off` before the caller could see it
    /// (sealed segment, or linked item under its bucket lock).
    pub unsafe fn header(&self, seg: u32, off: usize, end: usize) -> Option<Header> {
        if off + 2 > end {
            return None;
        }
        // SAFETY: per the caller, these bytes are written and not being written.
        let lead = unsafe { self.bytes(seg, off, 2) };
        let n = Header::lengths_len(lead[1]);
        if off + n > end {
            return None;
        }
        // SAFETY: as above.
        let h = Header::parse_lengths(unsafe { self.bytes(seg, off, n) });
        (off + h.total_len() <= end).then_some(h)
    }

    /// The whole item at `off`.
    ///
    /// # Safety
    /// The item is linked and the caller holds its bucket lock (rules 2, 4), or
    /// the caller owns the segment exclusively.
    pub unsafe fn item(&self, seg: u32, off: usize) -> Option<Item<'_>> {
        // SAFETY: forwarded from the caller.
        unsafe { self.item_within(seg, off, self.seg_size) }
    }

    /// The whole item at `off`, if it ends by `end` (a load's segment is
    /// written up to its image's length).
    ///
    /// # Safety
    /// As [`Arena::item`], and the bytes below `end` were written.
    pub unsafe fn item_within(&self, seg: u32, off: usize, end: usize) -> Option<Item<'_>> {
        // SAFETY: forwarded from the caller.
        let h = unsafe { self.header(seg, off, end)? };
        // SAFETY: forwarded from the caller; `header` checked the bounds.
        Some(Item::new(h, unsafe { self.bytes(seg, off, h.total_len()) }))
    }
}

/// A value at least this long is copied into its segment past the caches
/// ([`copy_value`]).
const STREAM_FROM: usize = 64 << 10;

/// Copies a value into the segment bytes `dst` (as long as `src`). One of
/// [`STREAM_FROM`] bytes or more is written with non-temporal stores: the
/// segment's memory is rarely in a cache (segments are reused oldest
/// first), so an ordinary copy first reads every destination line it
/// writes, and a value that large would only push the caches' contents
/// out. Scenario 11's sets (400-600 KB values) took 13-15% less server CPU
/// (docs/benchmarks.md, "Mixed value sizes and large write-once values").
/// The copy ends with a store fence, so the bytes are visible to other
/// threads before anything stored after it, the bucket lock's release
/// that links the item among them (rule 2 holds as for a plain copy).
pub(crate) fn copy_value(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len(), "a value is copied into room of its own length");
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if src.len() >= STREAM_FROM {
        stream_copy(dst, src);
        return;
    }
    dst.copy_from_slice(src);
}

/// `dst.copy_from_slice(src)` with 16-byte non-temporal stores where `dst`
/// is aligned to them, then a store fence.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn stream_copy(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let len = src.len().min(dst.len());
    let head = dst.as_ptr().align_offset(16).min(len);
    dst[..head].copy_from_slice(&src[..head]);
    let mut i = head;
    // SAFETY: SSE2 is part of x86_64. Each pass reads src[i..i + 64] and
    // writes dst[i..i + 64], in bounds of both (i + 64 <= len, both at
    // least len long); the loads are unaligned ones, and the stores are
    // at dst + i, 16-byte aligned since dst + head is and i moves by 64.
    // The slices do not overlap (one is borrowed mutably).
    unsafe {
        while i + 64 <= len {
            let s = src.as_ptr().add(i).cast::<__m128i>();
            let d = dst.as_mut_ptr().add(i).cast::<__m128i>();
            let (a, b, c, e) =
                (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            i += 64;
        }
        _mm_sfence();
    }
    dst[i..len].copy_from_slice(&src[i..len]);
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// Whether transparent huge pages are used only where `madvise` asks.
fn thp_on_madvise() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").is_ok_and(|m| m.contains("[madvise]"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{encoded_len, write_head, Fields};

    #[test]
    fn write_then_read_an_item() {
        let a = Arena::new(4096, 2).unwrap();
        let f = Fields { flags: 7, ..Fields::default() };
        let len = encoded_len(3, 5, &f);
        // SAFETY: single-threaded test owns the whole arena.
        let dst = unsafe { a.bytes_mut(1, 100, len) };
        let v = write_head(dst, b"key", 5, &f);
        dst[v..].copy_from_slice(b"hello");
        // SAFETY: written above, no concurrent writer.
        let it = unsafe { a.item(1, 100) }.unwrap_or_else(|| panic!("item"));
        assert_eq!((it.key(), it.value(), it.flags()), (&b"key"[..], &b"hello"[..], 7));
        // SAFETY: as above.
        assert_eq!(unsafe { a.header(1, 100, 100 + len - 1) }, None, "runs past end");
    }

    #[test]
    fn a_value_copies_exactly_at_every_length_and_alignment() {
        // Lengths around the streaming threshold and its 64-byte passes,
        // destinations at every offset within 16 bytes (Miri: the plain
        // copy, smaller).
        let base = if cfg!(miri) { 100 } else { STREAM_FROM };
        let src: Vec<u8> = (0..base + 200).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [base - 1, base, base + 1, base + 63, base + 64, base + 65, base + 199] {
            for at in 0..16 {
                let mut dst = vec![0u8; len + 32];
                copy_value(&mut dst[at..at + len], &src[..len]);
                assert_eq!(&dst[at..at + len], &src[..len], "len {len} at {at}");
                assert!(dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0), "len {len} at {at}: wrote outside");
            }
        }
    }

    #[test]
    fn huge_page_advice_changes_no_byte() {
        let seg = if cfg!(miri) { 9 << 13 } else { 1 << 20 };
        let a = Arena::new(seg, 4).unwrap();
        for s in 0..4 {
            // SAFETY: single-threaded test owns the whole arena.
            unsafe { a.bytes_mut(s, 0, seg) }.fill(s as u8 + 1);
        }
        a.advise_huge_range(1, 2, true);
        // SAFETY: as above.
        unsafe { a.bytes_mut(2, 0, seg) }.fill(9);
        a.advise_huge_range(1, 2, false);
        // Out of range or reversed: nothing.
        a.advise_huge_range(3, 4, true);
        a.advise_huge_range(2, 1, true);
        for (s, b) in [(0, 1), (1, 2), (2, 9), (3, 4)] {
            // SAFETY: as above.
            assert!(unsafe { a.bytes(s, 0, seg) } == &vec![b; seg][..], "segment {s}");
        }
    }

    #[test]
    fn a_released_segment_reads_zero_and_is_usable_again() {
        // Under Miri, which checks every byte the test reads one by one, a
        // smaller segment: still whole pages inside, partial ones at its edges.
        let seg = if cfg!(miri) { 9 << 13 } else { 1 << 20 };
        let a = Arena::new(seg, 3).unwrap();
        for s in 0..3 {
            // SAFETY: single-threaded test owns the whole arena.
            unsafe { a.bytes_mut(s, 0, seg) }.fill(0xa5);
        }
        // SAFETY: as above; nothing links into segment 1.
        unsafe { a.release(1) };
        // SAFETY: as above.
        let (s0, s1, s2) = unsafe { (a.bytes(0, 0, seg), a.bytes(1, 0, seg), a.bytes(2, 0, seg)) };
        // Whole-slice comparisons (a memcmp, which Miri runs in one step).
        let (filled, zeros) = (vec![0xa5; seg], vec![0; seg]);
        assert!(s0 == &filled[..] && s2 == &filled[..], "neighbours untouched");
        // Partial pages at the segment's edges keep their bytes; whole ones are dropped.
        assert!(s1[8192..seg - 8192] == zeros[8192..seg - 8192], "released pages read as zeros");
        // SAFETY: as above.
        unsafe { a.bytes_mut(1, 100, 3) }.copy_from_slice(b"new");
        // SAFETY: as above.
        assert_eq!(unsafe { a.bytes(1, 100, 3) }, b"new");
    }

    #[test]
    #[should_panic(expected = "arena bounds")]
    fn out_of_bounds_is_refused() {
        let a = Arena::new(4096, 1).unwrap();
        // SAFETY: the call must panic before touching memory.
        let _ = unsafe { a.bytes(0, 4000, 200) };
    }
}
