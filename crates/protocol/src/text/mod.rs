//! The classic text protocol (memcached 1.6 `doc/protocol.txt`).
//!
//! [`parse`] looks at the front of a connection's read buffer and returns one
//! request, how many bytes it used, or that more bytes are needed. It follows
//! memcached's `proto_text.c` step by step where clients can see the
//! difference: tokens split on single spaces only, at most 24 tokens counted,
//! the same token-count checks (`ERROR`), the same order of argument checks,
//! and the same treatment of `noreply` (set before an argument error, so the
//! error reply is suppressed too).
//!
//! One file per command family: [`storage`], [`retrieval`], [`delete`],
//! [`arith`], [`touch`], [`admin`]; the meta commands (`mg`, `ms`, `md`,
//! `ma`, `mn`, `me`), which share this framing, in [`meta`].

pub mod admin;
pub mod arith;
pub mod auth;
pub mod delete;
pub mod meta;
pub mod retrieval;
pub mod storage;
pub mod touch;

pub use retrieval::Keys;

use crate::ops;
use crate::ops::Mode;

/// A line without a newline longer than this is junk and closes the
/// connection, unless it is a `get`/`gets` (memcached's 2048-byte rule).
pub const MAX_COMMAND_LINE: usize = 2048;

/// memcached's `MAX_TOKENS`: the tokenizer stops counting after 23 tokens.
const MAX_TOKENS: usize = 24;

/// Limits the parser needs from the server's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `-I`: the largest item, in bytes, header and key included.
    pub item_size_max: usize,
    /// Bytes of per-item overhead counted against `item_size_max`.
    pub item_overhead: usize,
    /// Longest `get`/`gets` line accepted before the connection is closed.
    pub max_get_line: usize,
    /// Whether `debug_advance_clock` and `debug_panic` are recognised
    /// (`--enable-debug-clock`). Only builds with the `test-hooks` feature
    /// have those commands; in others they are unknown whatever this says.
    pub debug_clock: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { item_size_max: 1024 * 1024, item_overhead: 0, max_get_line: 1024 * 1024, debug_clock: false }
    }
}

/// The outcome of looking at the front of the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    /// A whole request; `consumed` bytes of the buffer belong to it.
    Done { request: Request<'a>, consumed: usize },
    /// Not enough bytes yet. `need` is the buffer length at which parsing can
    /// make progress, when known (a storage command waiting for its data), or 0.
    Incomplete { need: usize },
    /// memcached drops the connection here (junk line too long, HTTP request).
    Close,
}

/// One parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub command: Command<'a>,
    /// No reply is sent for success nor for the errors memcached suppresses.
    pub noreply: bool,
}

/// What the client asked for, keys and values borrowed from the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get`/`gets`/`bget`/`gat`/`gats`: every key is read as `read` says
    /// (`gat` touches); `cas`: the replies show the CAS.
    Get {
        keys: Keys<'a>,
        cas: bool,
        read: ops::Read,
    },
    /// `set add replace append prepend cas` with its data block (`cas` is a
    /// set with a compare value).
    Store(ops::Set<'a>),
    /// A storage command whose item exceeds `-I`: reply, then discard
    /// `swallow` bytes of data that follow the line. `cas`: the command was
    /// `cas` (memcached drops the old item only for `set`).
    TooLarge {
        mode: ops::Mode,
        cas: bool,
        key: &'a [u8],
        swallow: usize,
    },
    Delete(ops::Delete<'a>),
    Arith(ops::Arith<'a>),
    /// `touch`: a read that only sets a new exptime.
    Touch(ops::Get<'a>),
    FlushAll {
        delay: i32,
    },
    Version,
    /// `verbosity <level>`.
    Verbosity {
        level: u32,
    },
    /// `cache_memlimit <megabytes>`: change the memory limit at run time.
    CacheMemlimit {
        megabytes: u32,
    },
    /// `lru_crawler metadump|mgdump all|hash|<class ids>`: a line per item,
    /// of metadata (`metadump`) or an `mg <key>` command (`mgdump`).
    /// `classes` is a bitmap of the slab class ids asked for (1–63; `all`
    /// and `hash` ask for every class).
    Metadump {
        classes: u64,
        mg: bool,
    },
    /// memcached's run-time tuning: `slabs`, `lru`, `lru_crawler
    /// crawl|sleep|tocrawl|enable|disable`, `extstore`.
    Tune(admin::Tune),
    Quit,
    /// `shutdown` with its optional mode token (checked by the server, after
    /// it has checked that shutdown is enabled, as memcached does).
    Shutdown {
        mode: Option<&'a [u8]>,
    },
    /// `stats` with its argument tokens (the server owns the groups).
    Stats {
        args: Tokens<'a>,
    },
    /// `refresh_certs [noreply]`: load the TLS certificates again.
    RefreshCerts,
    /// `watch` with its argument tokens, the event kinds (the server owns
    /// them).
    Watch {
        args: Tokens<'a>,
    },
    /// `snapshot`: strata's own; writes a snapshot in the background
    /// (with `--snapshot-dir`).
    Snapshot,
    /// `debug_advance_clock <seconds>`: only with [`Config::debug_clock`]
    /// (and the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    DebugAdvanceClock {
        seconds: u32,
    },
    /// `debug_panic`: only with [`Config::debug_clock`]; the server panics
    /// serving it, which tests use to check that a panic costs only its
    /// connection.
    #[cfg(feature = "test-hooks")]
    DebugPanic,
    /// `mg`; `value` is the `v` flag.
    MetaGet {
        get: ops::Get<'a>,
        reply: meta::Reply<'a>,
        value: bool,
    },
    /// `ms` with its data block.
    MetaSet {
        set: ops::Set<'a>,
        reply: meta::Reply<'a>,
    },
    /// `ms` whose item exceeds `-I`: the old item is dropped and `swallow`
    /// bytes of data discarded.
    MetaTooLarge {
        key: ops::Key<'a>,
        reply: meta::Reply<'a>,
        swallow: usize,
    },
    MetaDelete {
        del: ops::Delete<'a>,
        reply: meta::Reply<'a>,
    },
    /// `ma`; `value` is the `v` flag.
    MetaArith {
        arith: ops::Arith<'a>,
        reply: meta::Reply<'a>,
        value: bool,
    },
    /// `mn`.
    MetaNoop,
    /// `me`; `base64` is its `b` flag.
    MetaDebug {
        key: ops::Key<'a>,
        base64: bool,
    },
    /// A request that gets an error reply; the connection stays usable.
    Error(ClientError),
    /// An error reply, then `swallow` bytes of the request's data discarded.
    Swallow {
        error: ClientError,
        swallow: usize,
    },
}

/// Error replies to a request; the connection carries on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientError {
    /// Unknown command or wrong number of tokens.
    Error,
    BadFormat,
    BadDataChunk,
    InvalidExptime,
    InvalidDelta,
    DeleteUsage,
    // Meta protocol errors (`_meta_flag_preparse` and the meta commands).
    DuplicateFlag,
    InvalidFlag,
    BadToken,
    KeyDecode,
    OpaqueTooLong,
    /// mg's wording.
    OptionsTooLong,
    /// ms, md and ma's wording.
    OptionsTooLongShort,
    /// md and ma report every flag error this way.
    InvalidOrDuplicateFlag,
    MTokenLength,
    InvalidSetMode,
    InvalidArithMode,
    /// `lru_crawler metadump` with a class id that is not one.
    BadClass,
    /// `lru_crawler sleep` over a second.
    SleepTooLong,
    /// `lru tune` whose hot and warm percentages exceed 80.
    LruPercents,
    /// `lru tune` with an age factor of 0 or less.
    LruFactors,
}

impl ClientError {
    /// The exact reply line.
    pub fn reply(self) -> &'static [u8] {
        match self {
            ClientError::Error => b"ERROR\r\n",
            ClientError::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            ClientError::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            ClientError::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            ClientError::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            ClientError::DeleteUsage => b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
            ClientError::DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            ClientError::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            ClientError::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            ClientError::KeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            ClientError::OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            ClientError::OptionsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            ClientError::OptionsTooLongShort => b"CLIENT_ERROR options flags too long\r\n",
            ClientError::InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ClientError::MTokenLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            ClientError::InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ClientError::InvalidArithMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            ClientError::BadClass => b"BADCLASS invalid class id\r\n",
            ClientError::SleepTooLong => b"CLIENT_ERROR sleep must be one second or less\r\n",
            ClientError::LruPercents => b"ERROR hot and warm pcts must not exceed 80\r\n",
            ClientError::LruFactors => b"ERROR hot/warm age factors must be greater than 0\r\n",
        }
    }
}

/// Space-separated tokens of part of a line, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens<'a>(pub &'a [u8]);

impl<'a> Tokens<'a> {
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0.split(|&b| b == b' ').filter(|t| !t.is_empty())
    }
}

/// The tokens of one command line, as memcached's `tokenize_command` sees them.
pub(crate) struct Line<'a> {
    line: &'a [u8],
    pub tokens: [&'a [u8]; MAX_TOKENS],
    /// memcached's `ntokens`: real tokens plus the terminal empty one.
    pub ntokens: usize,
    /// Everything after the first token, for multi-key commands.
    pub after_command: &'a [u8],
}

/// The tokens of `line` split on single spaces (runs of spaces give no
/// empty tokens), each with its offset. memchr, not a byte-at-a-time split:
/// tokenizing is most of a short request's parse.
pub(crate) fn split_tokens(line: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut next = 0;
    memchr::memchr_iter(b' ', line).chain(std::iter::once(line.len())).filter_map(move |end| {
        let start = next;
        next = end + 1;
        (end > start).then(|| (start, &line[start..end]))
    })
}

impl<'a> Line<'a> {
    fn new(line: &'a [u8]) -> Line<'a> {
        let mut tokens: [&'a [u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut n = 0;
        let mut after_command: &'a [u8] = &[];
        for (start, tok) in split_tokens(line) {
            if n == 0 {
                after_command = line.get(start + tok.len()..).unwrap_or(&[]);
            }
            if n < MAX_TOKENS - 1 {
                tokens[n] = tok;
            }
            n += 1;
        }
        // Past 23 tokens memcached stops and reports 24.
        let ntokens = n.min(MAX_TOKENS - 1) + 1;
        Line { line, tokens, ntokens, after_command }
    }

    /// The line from token `i` on (empty if there is no such token).
    pub fn rest_from(&self, i: usize) -> &'a [u8] {
        if i + 1 >= self.ntokens || i >= MAX_TOKENS - 1 {
            return &[];
        }
        // Tokens are subslices of `line`: their distance is an offset.
        let at = self.tokens[i].as_ptr() as usize - self.line.as_ptr() as usize;
        &self.line[at..]
    }

    /// memcached's `set_noreply_maybe`: the last real token is `noreply`.
    fn noreply(&self) -> bool {
        self.ntokens >= 2 && self.tokens[self.ntokens - 2] == b"noreply"
    }

    fn count_is(&self, a: usize, b: usize) -> bool {
        self.ntokens == a || self.ntokens == b
    }
}

/// The opening every single-key command shares, in memcached's order: token
/// count (`ERROR`), then `noreply`, then the key length (`CLIENT_ERROR`, which
/// `noreply` already suppresses). Returns the key and `noreply`, or the error
/// and whether `noreply` suppresses it.
fn single_key<'a>(l: &Line<'a>, counts: (usize, usize)) -> Result<(&'a [u8], bool), (ClientError, bool)> {
    if !l.count_is(counts.0, counts.1) {
        return Err((ClientError::Error, false));
    }
    let noreply = l.noreply();
    let key = l.tokens[1];
    if key.len() > crate::KEY_MAX_LENGTH {
        return Err((ClientError::BadFormat, noreply));
    }
    Ok((key, noreply))
}

pub(crate) fn error<'a>(e: ClientError, noreply: bool, consumed: usize) -> Parse<'a> {
    Parse::Done { request: Request { command: Command::Error(e), noreply }, consumed }
}

pub(crate) fn done(command: Command<'_>, noreply: bool, consumed: usize) -> Parse<'_> {
    Parse::Done { request: Request { command, noreply }, consumed }
}

/// Parses the request at the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], config: &Config) -> Parse<'a> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return no_newline_yet(buf, config);
    };
    let consumed = nl + 1;
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    // memcached works on a C string: a NUL byte ends the command.
    if let Some(nul) = memchr::memchr(0, line) {
        line = &line[..nul];
    }
    let l = Line::new(line);
    if l.ntokens < 2 || l.tokens[0].len() < 2 {
        return error(ClientError::Error, false, consumed);
    }
    let cmd = l.tokens[0];
    match cmd {
        b"get" | b"bget" => retrieval::parse(&l, false, false, consumed),
        b"gets" => retrieval::parse(&l, true, false, consumed),
        b"gat" => retrieval::parse(&l, false, true, consumed),
        b"gats" => retrieval::parse(&l, true, true, consumed),
        b"set" => storage::parse(&l, Mode::Set, false, buf, consumed, config),
        b"add" => storage::parse(&l, Mode::Add, false, buf, consumed, config),
        b"replace" => storage::parse(&l, Mode::Replace, false, buf, consumed, config),
        b"append" => storage::parse(&l, Mode::Append, false, buf, consumed, config),
        b"prepend" => storage::parse(&l, Mode::Prepend, false, buf, consumed, config),
        b"cas" => storage::parse(&l, Mode::Set, true, buf, consumed, config),
        b"delete" => delete::parse(&l, consumed),
        b"incr" => arith::parse(&l, true, consumed),
        b"decr" => arith::parse(&l, false, consumed),
        b"touch" => touch::parse(&l, consumed),
        b"flush_all" => admin::parse_flush_all(&l, consumed),
        b"version" => done(Command::Version, false, consumed),
        b"quit" => done(Command::Quit, false, consumed),
        b"verbosity" => admin::parse_verbosity(&l, consumed),
        b"cache_memlimit" => admin::parse_cache_memlimit(&l, consumed),
        b"lru_crawler" => admin::parse_lru_crawler(&l, consumed),
        b"slabs" => admin::parse_slabs(&l, consumed),
        b"lru" => admin::parse_lru(&l, consumed),
        b"extstore" => admin::parse_extstore(&l, consumed),
        b"shutdown" => admin::parse_shutdown(&l, consumed),
        b"snapshot" if l.ntokens == 2 => done(Command::Snapshot, false, consumed),
        b"stats" => done(Command::Stats { args: Tokens(l.after_command) }, false, consumed),
        b"watch" => done(Command::Watch { args: Tokens(l.after_command) }, false, consumed),
        b"refresh_certs" if l.count_is(2, 3) => done(Command::RefreshCerts, l.noreply(), consumed),
        #[cfg(feature = "test-hooks")]
        b"debug_advance_clock" if config.debug_clock => admin::parse_debug_clock(&l, consumed),
        #[cfg(feature = "test-hooks")]
        b"debug_panic" if config.debug_clock && l.ntokens == 2 => done(Command::DebugPanic, false, consumed),
        b"mg" => meta::get::parse(&l, consumed),
        b"ms" => meta::set::parse(&l, buf, consumed, config),
        b"md" => meta::delete::parse(&l, consumed),
        b"ma" => meta::arith::parse(&l, consumed),
        b"mn" => done(Command::MetaNoop, false, consumed),
        b"me" => meta::debug::parse(&l, consumed),
        _ => {
            // memcached hangs up on what looks like an HTTP request.
            if l.tokens[l.ntokens - 2].starts_with(b"HTTP/") {
                Parse::Close
            } else {
                error(ClientError::Error, false, consumed)
            }
        }
    }
}

fn no_newline_yet<'a>(buf: &'a [u8], config: &Config) -> Parse<'a> {
    if buf.len() <= MAX_COMMAND_LINE {
        return Parse::Incomplete { need: 0 };
    }
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    let is_get = rest.starts_with(b"get ") || rest.starts_with(b"gets ");
    if spaces > 100 || !is_get || buf.len() > config.max_get_line {
        Parse::Close
    } else {
        Parse::Incomplete { need: 0 }
    }
}

#[cfg(test)]
mod tests;
