//! A slot pointing at flash. It keeps the memory slot's tag (bits 52–63) and
//! marks itself with bit 47; the other 51 bits, taken as one number `p`
//! (bits 48–51 on top of bits 0–46):
//! ```text
//!  50    49        43 42        33 32                     0
//! +----+------------+------------+------------------------+
//! |read| more (7)   | ext tag 10 | address (33, granules) |
//! +----+------------+------------+------------------------+
//! ```
//! - read: read from flash since it went there (`mg h`).
//! - more: the hash bits above the stripe's table size when the slot was
//!   placed, after a leading 1 (six bits at most): a stripe that doubles
//!   re-places the slot by the next one without reading the key, which is
//!   not in RAM. A slot with none left is dropped by the seventh doubling
//!   (the stripe then holds 64 times the items it held when the item went
//!   to flash).
//! - ext tag: 10 more bits of the key's hash. With the tag and the `more`
//!   bits left (`more_matches`), up to 28 bits: a write that finds no key
//!   in memory drops the flash slots that match without reading them, so
//!   a false match costs another key a miss about once in 268 million such
//!   slots (once in 4 million when a slot's six growth bits are used up).
//! - address: where the record is, in the log's granules.

pub const FLAG: u64 = super::slot::FLASH;
// Bit 47, as drawn above.
const _: () = assert!(FLAG == 1 << 47);
const LOW: u64 = (1 << 47) - 1;
const ADDR_MASK: u64 = (1 << strata_flash::ADDR_BITS) - 1;
const MORE: u64 = 0x7f << 43;
const READ: u64 = 1 << 50;

fn payload(s: u64) -> u64 {
    (((s >> 48) & 0xf) << 47) | (s & LOW)
}
fn from_payload(tag: u16, p: u64) -> u64 {
    (u64::from(tag) << 52) | (((p >> 47) & 0xf) << 48) | FLAG | (p & LOW)
}
pub fn pack(tag: u16, ext: u16, more: u8, addr: u64) -> u64 {
    let p = (u64::from(more & 0x7f) << 43) | (u64::from(ext & 0x3ff) << 33) | (addr & ADDR_MASK);
    from_payload(tag, p)
}
pub fn addr(s: u64) -> u64 {
    payload(s) & ADDR_MASK
}
pub fn ext(s: u64) -> u16 {
    ((payload(s) >> 33) & 0x3ff) as u16
}
pub fn more(s: u64) -> u8 {
    ((payload(s) >> 43) & 0x7f) as u8
}
/// Whether a slot's `more` bits (its growth bits after their leading 1)
/// are the low bits of `above`, the key's hash bits above the stripe's
/// table now. A slot with none left matches any.
pub fn more_matches(more: u8, above: u32) -> bool {
    let k = 7u32.saturating_sub(more.leading_zeros());
    let mask = (1u32 << k) - 1;
    u32::from(more) & mask == above & mask
}
pub fn with_more(s: u64, more: u8) -> u64 {
    let p = (payload(s) & !(0x7f << 43)) | (u64::from(more & 0x7f) << 43);
    from_payload(super::slot::tag(s), p)
}
pub fn read(s: u64) -> bool {
    payload(s) & READ != 0
}
pub fn with_read(s: u64) -> u64 {
    from_payload(super::slot::tag(s), payload(s) | READ)
}
/// The slot without its `more` bits (which growth changes) and read
/// mark: tags and address identify the record.
pub fn location(s: u64) -> u64 {
    from_payload(super::slot::tag(s), payload(s) & !MORE & !READ)
}
