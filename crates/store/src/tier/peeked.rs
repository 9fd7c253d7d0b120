//! What a peek at a key's flash records found (`peek.rs`): the state a
//! worker keeps for the add, replace, cas or delete it runs.

/// A live record of the key on flash, as a peek read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peeked {
    /// Its flash slot.
    pub(crate) slot: u64,
    /// What `store_form` needs of an existing item: its CAS, expiry and
    /// state byte.
    pub(crate) cas: u64,
    pub(crate) expiry: u32,
    pub(crate) state: u8,
}

/// The key's flash slots as a peek found them: the live record of the key,
/// if any, and the location of every slot with the key's tags it looked
/// at and left linked (other keys' records with the same tags).
#[derive(Debug, Default)]
pub(crate) struct Peek {
    pub(crate) live: Option<Peeked>,
    pub(super) seen: Vec<u64>,
}
