//! Protocol-neutral requests: what a client asked the cache to do, whichever
//! protocol it spoke. The classic text, meta and binary parsers all emit
//! these for their data commands, and the server runs them through one
//! execute path, so each command's semantics exist once; a protocol's own
//! request type adds only what its reply needs (a meta reply's flags, a
//! binary header).
//!
//! Times are the client's exptime values as signed seconds (the binary
//! protocol's unsigned ones are converted by its parser); memcached's rules
//! for relative and absolute times are applied once, by the server's clock.

/// A key as the store sees it: borrowed from the request, or decoded from
/// base64 (the meta protocol's `b` flag; at most 187 bytes, and the only
/// case that allocates, which keeps every request small).
#[derive(Clone, PartialEq, Eq)]
pub enum Key<'a> {
    Raw(&'a [u8]),
    Decoded(Box<[u8]>),
}

impl<'a> Key<'a> {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Raw(k) => k,
            Key::Decoded(k) => k,
        }
    }
}

impl std::fmt::Debug for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// How a read treats the item it finds: everything a read asks for but
/// its key, so a multi-key `get` carries one of these for all its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Counts as a use of the item (memcached's LRU bump; `mg u` turns it off).
    pub bump: bool,
    /// New exptime on a hit (`touch`, `gat`, `mg T`, binary TOUCH and GAT).
    pub touch: Option<i32>,
    /// The reply can say `W`/`X`/`Z`: a stale item hands its recache token
    /// to this read if nobody has it (`mg`; classic reads do not take part).
    pub tokens: bool,
    /// Win the recache token if the item expires before this exptime (`mg R`).
    pub recache: Option<i32>,
    /// Create an empty item with this exptime on a miss (`mg N`).
    pub vivify: Option<i32>,
    /// CAS of an item the read creates (`mg E`).
    pub new_cas: Option<u64>,
    /// The reply needs the item's last access time (`mg l`).
    pub last_access: bool,
    /// A touching read that misses counts as a touch (`touch`, `gat`); `mg`
    /// with `T` counts its misses as gets, as memcached does.
    pub touch_miss_stats: bool,
}

impl Read {
    /// A plain `get`.
    pub const GET: Read = Read {
        bump: true,
        touch: None,
        tokens: false,
        recache: None,
        vivify: None,
        new_cas: None,
        last_access: false,
        touch_miss_stats: false,
    };

    /// `gat`/`gats` and binary GAT: a get that also sets a new exptime.
    pub const fn get_and_touch(exptime: i32) -> Read {
        Read { touch: Some(exptime), touch_miss_stats: true, ..Read::GET }
    }

    /// `touch` and binary TOUCH: sets a new exptime without counting as a
    /// use of the item.
    pub const fn touch(exptime: i32) -> Read {
        Read { bump: false, ..Read::get_and_touch(exptime) }
    }
}

/// A read of one key: `get`-family keys, `touch`, `mg`, binary GET/GAT/TOUCH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get<'a> {
    pub key: Key<'a>,
    pub read: Read,
}

impl<'a> Get<'a> {
    pub fn plain(key: Key<'a>) -> Get<'a> {
        Get { key, read: Read::GET }
    }
}

/// Storage modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// A write: `set add replace append prepend cas`, `ms`, binary SET ADD
/// REPLACE APPEND PREPEND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set<'a> {
    pub mode: Mode,
    pub key: Key<'a>,
    pub flags: u32,
    pub exptime: i32,
    pub data: &'a [u8],
    /// Store only if the item's CAS is this (`cas`, `ms C`).
    pub compare: Option<u64>,
    /// With `compare`: an older CAS stores the item marked stale (`ms I`).
    pub invalidate: bool,
    /// CAS for the stored item (`ms E`).
    pub new_cas: Option<u64>,
    /// Append/prepend create a missing item with this exptime (`ms N`).
    pub vivify: Option<i32>,
    /// The key came in base64 (`ms b`).
    pub binary_key: bool,
}

impl<'a> Set<'a> {
    /// A write with no meta options: the classic and binary commands.
    pub fn plain(mode: Mode, key: Key<'a>, flags: u32, exptime: i32, data: &'a [u8]) -> Set<'a> {
        Set {
            mode,
            key,
            flags,
            exptime,
            data,
            compare: None,
            invalidate: false,
            new_cas: None,
            vivify: None,
            binary_key: false,
        }
    }
}

/// A delete: `delete`, `md`, binary DELETE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete<'a> {
    pub key: Key<'a>,
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    /// Keep the item, marked stale, with a new CAS (`md I`).
    pub invalidate: bool,
    /// `md T`: the new exptime of an item kept by `I` (else unchanged) or
    /// emptied by `x` (else never).
    pub touch: Option<i32>,
    /// Keep the item with an empty value, these client flags (`md F`) and
    /// its CAS (`md x`).
    pub remove_value: bool,
    pub flags: u32,
}

impl<'a> Delete<'a> {
    pub fn plain(key: Key<'a>) -> Delete<'a> {
        Delete { key, compare: None, new_cas: None, invalidate: false, touch: None, remove_value: false, flags: 0 }
    }
}

/// `incr`/`decr`, `ma`, binary INCREMENT/DECREMENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arith<'a> {
    pub key: Key<'a>,
    pub incr: bool,
    pub delta: u64,
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    /// New exptime on success (`ma T`).
    pub touch: Option<i32>,
    /// Create a missing item holding `initial` with this exptime (`ma N`, `J`).
    pub vivify: Option<i32>,
    pub initial: u64,
}

impl<'a> Arith<'a> {
    pub fn plain(key: Key<'a>, incr: bool, delta: u64) -> Arith<'a> {
        Arith { key, incr, delta, compare: None, new_cas: None, touch: None, vivify: None, initial: 0 }
    }
}
