//! Request encoders and incremental reply parsers for the four wire
//! protocols the bench speaks: memcached text, meta and binary, and Redis
//! RESP. Parsing is check-then-consume: [`parse`] returns `Ok(None)` until a
//! whole reply is buffered, so a reply split across reads costs nothing but
//! a second look.

use std::fmt;

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Classic `get`/`set`.
    Text,
    /// `mg`/`ms`; multi-get as quiet `mg … q` ended by `mn`.
    Meta,
    /// Binary `GET`/`SET`; multi-get as `GETKQ … NOOP`.
    Binary,
    /// Redis `GET`/`SET`/`MGET`.
    Resp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
            Protocol::Binary => "binary",
            Protocol::Resp => "resp",
        })
    }
}

/// What a request was, so its reply can be parsed and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Set,
    /// A get of `n` keys (1 is a plain get).
    Get(u16),
}

/// A complete reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reply {
    /// Bytes of the read buffer it took.
    pub consumed: usize,
    pub hits: u32,
    pub misses: u32,
    /// The server answered with an error (e.g. out of memory on a store).
    pub error: bool,
}

/// The reply stream does not follow the protocol: the connection is lost.
#[derive(Debug, thiserror::Error)]
#[error("unexpected {protocol} reply: {excerpt:?}")]
pub struct Desync {
    protocol: Protocol,
    excerpt: String,
}

fn desync(protocol: Protocol, buf: &[u8]) -> Desync {
    let end = buf.len().min(64);
    Desync { protocol, excerpt: String::from_utf8_lossy(&buf[..end]).into_owned() }
}

const BIN_HEADER: usize = 24;
const BIN_GET: u8 = 0x00;
const BIN_SET: u8 = 0x01;
const BIN_NOOP: u8 = 0x0a;
const BIN_GETKQ: u8 = 0x0d;

fn push_num(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn bin_header(out: &mut Vec<u8>, opcode: u8, keylen: usize, extlen: u8, bodylen: usize) {
    out.push(0x80);
    out.push(opcode);
    out.extend_from_slice(&(keylen as u16).to_be_bytes());
    out.push(extlen);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(bodylen as u32).to_be_bytes());
    out.extend_from_slice(&[0; 12]);
}

fn resp_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_num(out, b.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Appends a store of `value` under `key` (flags 0; `ttl` seconds, 0: no
/// expiry).
pub fn encode_set(p: Protocol, out: &mut Vec<u8>, key: &[u8], value: &[u8], ttl: u32) {
    match p {
        Protocol::Text => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" 0 ");
            push_num(out, ttl as usize);
            out.push(b' ');
            push_num(out, value.len());
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Meta => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_num(out, value.len());
            if ttl > 0 {
                out.extend_from_slice(b" T");
                push_num(out, ttl as usize);
            }
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Binary => {
            bin_header(out, BIN_SET, key.len(), 8, 8 + key.len() + value.len());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
            return;
        }
        Protocol::Resp if ttl > 0 => {
            out.extend_from_slice(b"*5\r\n$3\r\nSET\r\n");
            resp_bulk(out, key);
            resp_bulk(out, value);
            resp_bulk(out, b"EX");
            let mut n = itoa::Buffer::new();
            resp_bulk(out, n.format(ttl).as_bytes());
            return;
        }
        Protocol::Resp => {
            out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            resp_bulk(out, key);
            resp_bulk(out, value);
            return;
        }
    }
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a get of `keys` (one request, however many keys).
pub fn encode_get<'k>(p: Protocol, out: &mut Vec<u8>, keys: impl ExactSizeIterator<Item = &'k [u8]>) {
    let n = keys.len();
    match p {
        Protocol::Text => {
            out.extend_from_slice(b"get");
            for k in keys {
                out.push(b' ');
                out.extend_from_slice(k);
            }
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Meta if n == 1 => {
            for k in keys {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(k);
                out.extend_from_slice(b" v\r\n");
            }
        }
        Protocol::Meta => {
            for k in keys {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(k);
                out.extend_from_slice(b" v q\r\n");
            }
            out.extend_from_slice(b"mn\r\n");
        }
        Protocol::Binary if n == 1 => {
            for k in keys {
                bin_header(out, BIN_GET, k.len(), 0, k.len());
                out.extend_from_slice(k);
            }
        }
        Protocol::Binary => {
            for k in keys {
                bin_header(out, BIN_GETKQ, k.len(), 0, k.len());
                out.extend_from_slice(k);
            }
            bin_header(out, BIN_NOOP, 0, 0, 0);
        }
        Protocol::Resp if n == 1 => {
            out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
            for k in keys {
                resp_bulk(out, k);
            }
        }
        Protocol::Resp => {
            out.push(b'*');
            push_num(out, n + 1);
            out.extend_from_slice(b"\r\n$4\r\nMGET\r\n");
            for k in keys {
                resp_bulk(out, k);
            }
        }
    }
}

/// Position just past the `\r\n` ending the line at the front of `buf`.
fn line_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf).map(|i| i + 1)
}

fn parse_usize(b: &[u8]) -> Option<usize> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

fn is_error_line(line: &[u8]) -> bool {
    line.starts_with(b"SERVER_ERROR") || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"ERROR")
}

/// Parses the reply to a request of `kind` at the front of `buf`.
pub fn parse(p: Protocol, kind: Kind, buf: &[u8]) -> Result<Option<Reply>, Desync> {
    match p {
        Protocol::Text => parse_text(kind, buf),
        Protocol::Meta => parse_meta(kind, buf),
        Protocol::Binary => parse_binary(kind, buf),
        Protocol::Resp => parse_resp(kind, buf),
    }
}

fn parse_text(kind: Kind, buf: &[u8]) -> Result<Option<Reply>, Desync> {
    let mut r = Reply::default();
    let mut pos = 0;
    loop {
        let Some(end) = line_end(&buf[pos..]) else { return Ok(None) };
        let line = &buf[pos..pos + end];
        pos += end;
        match kind {
            Kind::Set => {
                r.error = line != b"STORED\r\n";
                if r.error && !is_error_line(line) {
                    return Err(desync(Protocol::Text, line));
                }
                r.consumed = pos;
                return Ok(Some(r));
            }
            Kind::Get(n) => {
                if line == b"END\r\n" {
                    r.misses = u32::from(n).saturating_sub(r.hits);
                    r.consumed = pos;
                    return Ok(Some(r));
                }
                if is_error_line(line) {
                    r.error = true;
                    r.consumed = pos;
                    return Ok(Some(r));
                }
                // VALUE <key> <flags> <bytes>
                let Some(len) = line.strip_prefix(b"VALUE ").and_then(|rest| {
                    let rest = rest.strip_suffix(b"\r\n")?;
                    parse_usize(rest.rsplit(|&b| b == b' ').next()?)
                }) else {
                    return Err(desync(Protocol::Text, line));
                };
                if buf.len() < pos + len + 2 {
                    return Ok(None);
                }
                pos += len + 2;
                r.hits += 1;
            }
        }
    }
}

fn parse_meta(kind: Kind, buf: &[u8]) -> Result<Option<Reply>, Desync> {
    let mut r = Reply::default();
    let mut pos = 0;
    loop {
        let Some(end) = line_end(&buf[pos..]) else { return Ok(None) };
        let line = &buf[pos..pos + end];
        pos += end;
        let single = matches!(kind, Kind::Set | Kind::Get(1));
        if line.starts_with(b"VA ") {
            let Some(len) = parse_usize(line[3..].split(|&b| b == b' ' || b == b'\r').next().unwrap_or_default())
            else {
                return Err(desync(Protocol::Meta, line));
            };
            if buf.len() < pos + len + 2 {
                return Ok(None);
            }
            pos += len + 2;
            r.hits += 1;
            if single {
                break;
            }
        } else if line.starts_with(b"HD") {
            break;
        } else if line.starts_with(b"EN") {
            r.misses = 1;
            break;
        } else if line.starts_with(b"MN") {
            if let Kind::Get(n) = kind {
                r.misses = u32::from(n).saturating_sub(r.hits);
            }
            break;
        } else if line.starts_with(b"NS") || line.starts_with(b"EX") || line.starts_with(b"NF") || is_error_line(line) {
            r.error = true;
            if single {
                break;
            }
        } else {
            return Err(desync(Protocol::Meta, line));
        }
    }
    r.consumed = pos;
    Ok(Some(r))
}

fn parse_binary(kind: Kind, buf: &[u8]) -> Result<Option<Reply>, Desync> {
    let mut r = Reply::default();
    let mut pos = 0;
    loop {
        let Some(h) = buf.get(pos..pos + BIN_HEADER) else { return Ok(None) };
        if h[0] != 0x81 {
            return Err(desync(Protocol::Binary, h));
        }
        let opcode = h[1];
        let status = u16::from_be_bytes([h[6], h[7]]);
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if buf.len() < pos + BIN_HEADER + body {
            return Ok(None);
        }
        pos += BIN_HEADER + body;
        match (kind, opcode) {
            (Kind::Set, _) => {
                r.error = status != 0;
                break;
            }
            (Kind::Get(1), _) if opcode == BIN_GET => {
                match status {
                    0 => r.hits = 1,
                    1 => r.misses = 1,
                    _ => r.error = true,
                }
                break;
            }
            (Kind::Get(n), BIN_NOOP) => {
                r.misses = u32::from(n).saturating_sub(r.hits);
                break;
            }
            (Kind::Get(_), BIN_GETKQ) => match status {
                0 => r.hits += 1,
                _ => r.error = true,
            },
            _ => return Err(desync(Protocol::Binary, h)),
        }
    }
    r.consumed = pos;
    Ok(Some(r))
}

/// One RESP value at `buf[pos..]`: `Some((end, is_nil))`.
fn resp_value(buf: &[u8], pos: usize) -> Result<Option<(usize, bool, bool)>, Desync> {
    let Some(end) = line_end(&buf[pos..]) else { return Ok(None) };
    let line = &buf[pos..pos + end];
    match line.first() {
        Some(b'+') | Some(b':') => Ok(Some((pos + end, false, false))),
        Some(b'-') => Ok(Some((pos + end, false, true))),
        Some(b'$') => match line.get(1..3) {
            Some(b"-1") => Ok(Some((pos + end, true, false))),
            _ => {
                let Some(len) = parse_usize(&line[1..]) else { return Err(desync(Protocol::Resp, line)) };
                let total = pos + end + len + 2;
                Ok((buf.len() >= total).then_some((total, false, false)))
            }
        },
        _ => Err(desync(Protocol::Resp, line)),
    }
}

fn parse_resp(kind: Kind, buf: &[u8]) -> Result<Option<Reply>, Desync> {
    let mut r = Reply::default();
    match kind {
        Kind::Set | Kind::Get(1) => {
            let Some((end, nil, err)) = resp_value(buf, 0)? else { return Ok(None) };
            r.consumed = end;
            r.error = err;
            if kind != Kind::Set && !err {
                if nil {
                    r.misses = 1;
                } else {
                    r.hits = 1;
                }
            }
        }
        Kind::Get(_) => {
            let Some(end) = line_end(buf) else { return Ok(None) };
            if buf[0] == b'-' {
                r.consumed = end;
                r.error = true;
                return Ok(Some(r));
            }
            let Some(count) = buf.strip_prefix(b"*").and_then(|l| parse_usize(&l[..end - 1])) else {
                return Err(desync(Protocol::Resp, buf));
            };
            let mut pos = end;
            for _ in 0..count {
                let Some((e, nil, _)) = resp_value(buf, pos)? else { return Ok(None) };
                pos = e;
                if nil {
                    r.misses += 1;
                } else {
                    r.hits += 1;
                }
            }
            r.consumed = pos;
        }
    }
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(p: Protocol, kind: Kind, reply: &[u8]) -> Reply {
        // Every strict prefix is incomplete; the whole is one reply.
        for cut in 0..reply.len() {
            assert_eq!(parse(p, kind, &reply[..cut]).ok().flatten(), None, "{p} prefix {cut}");
        }
        let r = parse(p, kind, reply).ok().flatten().unwrap_or_default();
        assert_eq!(r.consumed, reply.len());
        r
    }

    #[test]
    fn text_replies() {
        let r = whole(Protocol::Text, Kind::Get(3), b"VALUE a 0 2\r\nhi\r\nVALUE c 5 0\r\n\r\nEND\r\n");
        assert_eq!((r.hits, r.misses, r.error), (2, 1, false));
        assert!(!whole(Protocol::Text, Kind::Set, b"STORED\r\n").error);
        assert!(whole(Protocol::Text, Kind::Set, b"SERVER_ERROR out of memory storing object\r\n").error);
        assert!(parse(Protocol::Text, Kind::Set, b"VALUE\r\n").is_err());
    }

    #[test]
    fn meta_replies() {
        let r = whole(Protocol::Meta, Kind::Get(1), b"VA 2\r\nhi\r\n");
        assert_eq!((r.hits, r.misses), (1, 0));
        let r = whole(Protocol::Meta, Kind::Get(1), b"EN\r\n");
        assert_eq!((r.hits, r.misses), (0, 1));
        let r = whole(Protocol::Meta, Kind::Get(4), b"VA 1\r\na\r\nVA 3\r\nabc\r\nMN\r\n");
        assert_eq!((r.hits, r.misses), (2, 2));
        assert!(!whole(Protocol::Meta, Kind::Set, b"HD\r\n").error);
    }

    #[test]
    fn binary_replies() {
        let mut get = Vec::new();
        let mut keys: Vec<&[u8]> = vec![b"k1", b"k2"];
        encode_get(Protocol::Binary, &mut get, keys.drain(..));
        assert_eq!(get.len(), 3 * 24 + 4);
        let packet = |opcode: u8, status: u16, body: &[u8]| {
            let mut p = vec![0x81, opcode, 0, 0, 0, 0];
            p.extend_from_slice(&status.to_be_bytes());
            p.extend_from_slice(&(body.len() as u32).to_be_bytes());
            p.extend_from_slice(&[0; 12]);
            p.extend_from_slice(body);
            p
        };
        let mut multi = packet(BIN_GETKQ, 0, b"\0\0\0\0k1v");
        multi.extend(packet(BIN_NOOP, 0, b""));
        let r = whole(Protocol::Binary, Kind::Get(2), &multi);
        assert_eq!((r.hits, r.misses), (1, 1));
        let r = whole(Protocol::Binary, Kind::Get(1), &packet(BIN_GET, 1, b"Not found"));
        assert_eq!((r.hits, r.misses), (0, 1));
        assert!(whole(Protocol::Binary, Kind::Set, &packet(BIN_SET, 0x82, b"Out of memory")).error);
    }

    #[test]
    fn resp_replies() {
        assert!(!whole(Protocol::Resp, Kind::Set, b"+OK\r\n").error);
        assert!(whole(Protocol::Resp, Kind::Set, b"-OOM command not allowed\r\n").error);
        let r = whole(Protocol::Resp, Kind::Get(1), b"$-1\r\n");
        assert_eq!((r.hits, r.misses), (0, 1));
        let r = whole(Protocol::Resp, Kind::Get(3), b"*3\r\n$2\r\nab\r\n$-1\r\n$0\r\n\r\n");
        assert_eq!((r.hits, r.misses), (2, 1));
    }

    #[test]
    fn encoders() {
        let mut out = Vec::new();
        encode_set(Protocol::Text, &mut out, b"k", b"vv", 0);
        assert_eq!(out, b"set k 0 0 2\r\nvv\r\n");
        out.clear();
        encode_set(Protocol::Text, &mut out, b"k", b"vv", 300);
        assert_eq!(out, b"set k 0 300 2\r\nvv\r\n");
        out.clear();
        encode_set(Protocol::Meta, &mut out, b"k", b"vv", 0);
        assert_eq!(out, b"ms k 2\r\nvv\r\n");
        out.clear();
        encode_set(Protocol::Meta, &mut out, b"k", b"vv", 300);
        assert_eq!(out, b"ms k 2 T300\r\nvv\r\n");
        out.clear();
        encode_set(Protocol::Binary, &mut out, b"k", b"vv", 300);
        assert_eq!(&out[24..32], &[0, 0, 0, 0, 0, 0, 1, 44]);
        out.clear();
        encode_set(Protocol::Resp, &mut out, b"k", b"vv", 0);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n");
        out.clear();
        encode_set(Protocol::Resp, &mut out, b"k", b"vv", 300);
        assert_eq!(out, b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n$2\r\nEX\r\n$3\r\n300\r\n");
        out.clear();
        let keys: [&[u8]; 2] = [b"a", b"b"];
        encode_get(Protocol::Meta, &mut out, keys.into_iter());
        assert_eq!(out, b"mg a v q\r\nmg b v q\r\nmn\r\n");
        out.clear();
        encode_get(Protocol::Resp, &mut out, keys.into_iter());
        assert_eq!(out, b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n");
    }
}
