//! [`ItemView`]: an item as a reply shows it, the one shape the store hands
//! a reader and the reply encoders (classic `VALUE` lines, `mg`) take. Pure
//! data: the store fills it in, this crate only reads it.

/// An item as handed to a reader, valid only as long as its bytes (inside
/// the store's reader closure). Times are the server's relative seconds, 0
/// for never.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    /// Expiry before the read (it differs from `expiry` when the read
    /// touched the item).
    pub expiry_before: u32,
    /// Expiry after the read.
    pub expiry: u32,
    /// Read before this read.
    pub fetched: bool,
    /// When the item was written, if the reader asked for it (`mg l`);
    /// else 0.
    pub written: u32,
    /// Marked stale (`X`).
    pub stale: bool,
    /// Someone else already holds the recache token (`Z`).
    pub token_sent: bool,
    /// This read took the recache token (`W`).
    pub won: bool,
    /// This read created the item (`mg N` on a miss).
    pub created: bool,
    /// Stored under a base64 key (`ms b`): `k` shows it that way.
    pub binary_key: bool,
}

impl ItemView<'_> {
    /// The view without its key and value, kept by a reader that takes
    /// them from elsewhere later (the store's unlocked `Fetch`, a value
    /// read from flash).
    pub fn without_bytes(&self) -> ItemView<'static> {
        ItemView {
            key: &[],
            value: &[],
            flags: self.flags,
            cas: self.cas,
            expiry_before: self.expiry_before,
            expiry: self.expiry,
            fetched: self.fetched,
            written: self.written,
            stale: self.stale,
            token_sent: self.token_sent,
            won: self.won,
            created: self.created,
            binary_key: self.binary_key,
        }
    }
}
