//! Reply bytes, exactly as memcached writes them.

/// Fixed reply lines of the classic text protocol.
pub mod text {
    pub const STORED: &[u8] = b"STORED\r\n";
    pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
    pub const EXISTS: &[u8] = b"EXISTS\r\n";
    pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
    pub const DELETED: &[u8] = b"DELETED\r\n";
    pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
    pub const END: &[u8] = b"END\r\n";
    pub const OK: &[u8] = b"OK\r\n";
    pub const RESET: &[u8] = b"RESET\r\n";
    pub const ERROR: &[u8] = b"ERROR\r\n";
    pub const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
    pub const OUT_OF_MEMORY_STORING: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
    pub const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory\r\n";
    pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
    /// A change refused because `--durability`'s log cannot be written.
    pub const LOG_FAILED: &[u8] = b"SERVER_ERROR durability log failed\r\n";
    pub const SHUTDOWN_DISABLED: &[u8] = b"ERROR: shutdown not enabled\r\n";
    pub const FLUSH_DISABLED: &[u8] = b"CLIENT_ERROR flush_all not allowed\r\n";
    pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";
    /// `slabs reassign` with reassignment off (strata has none).
    pub const REASSIGN_DISABLED: &[u8] = b"CLIENT_ERROR slab reassignment disabled\r\n";
    pub const REASSIGN_BADCLASS: &[u8] = b"BADCLASS invalid src or dst class id\r\n";
    pub const REASSIGN_SAME: &[u8] = b"SAME src and dst class are identical\r\n";
    pub const REASSIGN_NOSPARE: &[u8] = b"NOSPARE source class has no spare pages\r\n";
    /// `lru_crawler enable` of a crawler that is on.
    pub const CRAWLER_START_FAILED: &[u8] = b"ERROR failed to start lru crawler thread\r\n";
    /// `lru_crawler crawl` or a dump after `lru_crawler disable`.
    pub const CRAWLER_DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled\r\n";
    /// A key dump or `watch` after other requests whose replies are not
    /// all sent yet (memcached: the connection's response stack).
    pub const METADUMP_PIPELINED: &[u8] = b"ERROR cannot pipeline other commands before metadump\r\n";
    pub const MGDUMP_PIPELINED: &[u8] = b"ERROR cannot pipeline other commands before mgdump\r\n";
    pub const WATCH_PIPELINED: &[u8] = b"ERROR cannot pipeline other commands before watch\r\n";
    /// `lru_crawler crawl` while a crawl runs.
    pub const CRAWLER_BUSY: &[u8] = b"BUSY currently processing crawler request\r\n";
    /// `lru_crawler crawl` whose thread could not start.
    pub const CRAWLER_FAILED: &[u8] = b"ERROR an unknown error happened\r\n";
    pub const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
    pub const MEMLIMIT_TOO_SMALL: &[u8] = b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
    pub const MEMLIMIT_NOT_BYTES: &[u8] = b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";
    pub const MEMLIMIT_FAILED: &[u8] = b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n";
    /// `lru_crawler mgdump` with -X.
    pub const KEY_DUMP_DISABLED: &[u8] = b"ERROR key dump not allowed\r\n";
    /// `lru_crawler metadump` with -X.
    pub const METADUMP_DISABLED: &[u8] = b"ERROR metadump not allowed\r\n";
    /// The end of an `lru_crawler mgdump`, and a meta miss.
    pub const EN: &[u8] = b"EN\r\n";
    pub const BAD_SHUTDOWN_MODE: &[u8] = b"CLIENT_ERROR invalid shutdown mode\r\n";
    /// `refresh_certs` without -Z (memcached's wording, case and all).
    pub const TLS_NOT_ENABLED: &[u8] = b"Error TLS not enabled\r\n";
    pub const WATCH_DISABLED: &[u8] = b"CLIENT_ERROR watch commands not allowed\r\n";
    pub const WATCHER_TOO_MANY: &[u8] = b"WATCHER_TOO_MANY log watcher limit reached\r\n";
    pub const CACHEDUMP_DISABLED: &[u8] = b"CLIENT_ERROR stats cachedump not allowed\r\n";
    /// strata's `snapshot` while one is being taken.
    pub const SNAPSHOT_RUNNING: &[u8] = b"SERVER_ERROR snapshot already in progress\r\n";
    /// `mn`'s reply.
    pub const MN: &[u8] = b"MN\r\n";
    /// `stats cachedump` without its arguments.
    pub const BAD_COMMAND_LINE: &[u8] = b"CLIENT_ERROR bad command line\r\n";
    pub const ILLEGAL_SLAB_ID: &[u8] = b"CLIENT_ERROR Illegal slab id\r\n";
    pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
    pub const AUTH_BAD_TERMINATION: &[u8] = b"CLIENT_ERROR bad command line termination\r\n";
    pub const AUTH_BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad authentication token format\r\n";
    pub const AUTH_FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";
    /// A reply over 64 UDP datagrams.
    pub const UDP_TOO_LARGE: &[u8] = b"SERVER_ERROR reply too large for UDP\r\n";
    /// strata's `snapshot` without --snapshot-dir.
    pub const SNAPSHOTS_OFF: &[u8] = b"SERVER_ERROR snapshots are off (start with --snapshot-dir)\r\n";
    /// `stats detail` with an argument other than on, off or dump.
    pub const DETAIL_USAGE: &[u8] = b"CLIENT_ERROR usage: stats detail on|off|dump\r\n";
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    let mut num = itoa::Buffer::new();
    out.reserve(key.len() + data.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(num.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(num.format(data.len()).as_bytes());
    if let Some(cas) = cas {
        out.push(b' ');
        out.extend_from_slice(num.format(cas).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends a number followed by `\r\n` (the incr/decr reply).
pub fn number(out: &mut Vec<u8>, n: u64) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(num.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}
