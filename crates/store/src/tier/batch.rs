//! A batch of items on their way to flash (`FlashBatch`): the state a
//! worker keeps in its `Active` while it clears a victim; the flash tier
//! (`tier/`) fills and writes it.

use crate::index::Loc;

/// Items of a victim on their way to flash: their records, and where each
/// came from.
#[derive(Debug, Default)]
pub(crate) struct FlashBatch {
    pub(super) buf: Vec<u8>,
    pub(super) items: Vec<Pending>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub(super) loc: Loc,
    pub(super) seg: u32,
    pub(super) granule_off: u32,
    /// The segment's epoch when the item was batched: a segment the
    /// batching worker does not own (the `ext_item_age` pass) may be
    /// cleared and reused before the batch is written, and a slot that
    /// points at the same place then is another item's.
    pub(super) epoch: u64,
    /// Sent by `ext_item_age`, not by eviction: if the write fails it
    /// stays in memory, where it still is.
    pub(super) aged: bool,
    /// The record's offset in the batch.
    pub(super) at: u32,
}
