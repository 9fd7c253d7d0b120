//! Segment images: what a snapshot carries of a sealed segment (its bytes,
//! epoch, write-time marks, latest expiry and which of its items were
//! live) and of the store as a whole (the epoch counter, the flush epoch
//! and the clock), DESIGN §7. Data only: taking them is `capture.rs`,
//! bringing them back `restore.rs`.

/// Which eviction queue a sealed segment is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// New writes (S3-FIFO's small queue).
    Small,
    /// Items copied forward (the main queue).
    Main,
}

/// A sealed segment, for [`Store::image`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub segment: u32,
    pub queue: Queue,
    /// When it was opened for writing (segments are sealed in this order
    /// per writer, and derived CAS values contain it).
    pub epoch: u64,
}

/// A copy of one sealed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentImage {
    pub segment: u32,
    /// The queue it was on, which a restored copy goes back to.
    pub queue: Queue,
    pub epoch: u64,
    /// The segment's bytes up to its write offset: items in the layout of
    /// `item.rs`, each at an offset aligned to the store's granule.
    pub bytes: Vec<u8>,
    /// Offsets in `bytes` of the items that were live when copied.
    pub live: Vec<u32>,
    /// Latest expiry of any item written into it (`u32::MAX`: one never
    /// expires), server-relative.
    pub max_expire: u32,
    /// Write-time marks `(offset, second)`: an item was written at the
    /// mark at or before its offset.
    pub write_times: Vec<(u32, u32)>,
    /// Compression dictionaries its values may name, one bit per id. The
    /// image holds a reference to each (taken while the segment held its
    /// own), for the caller to give back with [`Store::release_dicts`]
    /// once the dictionaries are saved: the segment may be evicted and a
    /// dictionary dropped (its id reused) before the snapshot is done.
    pub dicts: u64,
}

impl Default for SegmentImage {
    fn default() -> SegmentImage {
        SegmentImage {
            segment: 0,
            queue: Queue::Small,
            epoch: 0,
            bytes: Vec::new(),
            live: Vec::new(),
            max_expire: 0,
            write_times: Vec::new(),
            dicts: 0,
        }
    }
}

/// What a snapshot needs of the store as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreImage {
    /// Epochs handed out so far: a restored store must start above it, so
    /// that no CAS derived later equals one derived before.
    pub epoch: u64,
    /// Segments opened at or before this epoch hold only flushed items.
    pub flush_epoch: u64,
    /// A `flush_all` scheduled for this server-relative time (0: none).
    pub flush_at: u32,
    /// The clock: server-relative now, and the unix time it stands for.
    pub now: u32,
    pub unix_now: i64,
    pub segment_size: usize,
    pub item_size_max: usize,
    pub cas: bool,
}
