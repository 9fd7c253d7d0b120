//! An index slot in memory: tag, access count, segment and offset packed
//! in a u64, as the layout in `index.rs`'s module doc draws it.

pub const SEG_BITS: u32 = 24;
pub const OFF_BITS: u32 = 24;
const FREQ_SHIFT: u32 = 48;
const TAG_SHIFT: u32 = 52;

pub fn pack(tag: u16, freq: u8, seg: u32, off: u32) -> u64 {
    (u64::from(tag) << TAG_SHIFT)
        | (u64::from(freq & 0xf) << FREQ_SHIFT)
        | (u64::from(seg) << OFF_BITS)
        | u64::from(off & ((1 << OFF_BITS) - 1))
}
pub fn tag(s: u64) -> u16 {
    (s >> TAG_SHIFT) as u16
}
pub fn freq(s: u64) -> u8 {
    ((s >> FREQ_SHIFT) & 0xf) as u8
}
pub fn seg(s: u64) -> u32 {
    ((s >> OFF_BITS) & ((1 << SEG_BITS) - 1)) as u32
}
pub fn off(s: u64) -> u32 {
    (s & ((1 << OFF_BITS) - 1)) as u32
}
/// A write over a live version: an access for eviction, not a read.
pub const WRITTEN: u8 = 1;
/// Whether the item was read since written or copied forward.
pub fn was_read(s: u64) -> bool {
    freq(s) >= 2
}
/// `s` after one more read.
pub fn read_once(s: u64) -> u64 {
    with_freq(s, freq(s).saturating_add(2).min(15))
}
pub fn with_freq(s: u64, freq: u8) -> u64 {
    (s & !(0xf << FREQ_SHIFT)) | (u64::from(freq & 0xf) << FREQ_SHIFT)
}
/// The slot without its frequency: identifies the item's location.
pub fn location(s: u64) -> u64 {
    s & !(0xf << FREQ_SHIFT) & ((1 << TAG_SHIFT) - 1)
}
pub fn is_item(s: u64) -> bool {
    tag(s) != 0
}
pub fn link_target(s: u64) -> Option<u32> {
    (s != 0 && tag(s) == 0).then(|| (s - 1) as u32)
}
/// Memory segment ids stay below this: the bit above marks flash.
pub const MAX_RAM_SEGMENTS: u32 = 1 << (SEG_BITS - 1);
/// The mark of a slot pointing at flash (laid out as [`super::flash`]
/// says): the segment id's top bit, which memory segment ids never set.
pub const FLASH: u64 = 1 << (OFF_BITS + SEG_BITS - 1);
/// An item slot pointing at flash.
pub fn is_flash(s: u64) -> bool {
    s & FLASH != 0
}
