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
