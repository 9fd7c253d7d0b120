//! Composing binary response packets (layout drawn in [`super`]).

use super::{Header, Status, HEADER_LEN, RESPONSE_MAGIC};

/// The SASL mechanisms offered (`SASL list mechs`' value): PLAIN only.
pub const SASL_MECHS: &[u8] = b"PLAIN";

/// The value of a successful SASL authentication's response.
pub const SASL_AUTHENTICATED: &[u8] = b"Authenticated";

/// The parts of a response after its header.
#[derive(Debug, Default, Clone, Copy)]
pub struct Body<'a> {
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Appends a response header for `req` with the given status, CAS and body
/// lengths; the caller appends exactly `extlen + keylen + vlen` body bytes.
pub fn header(out: &mut Vec<u8>, req: &Header, status: Status, cas: u64, extlen: u8, keylen: u16, vlen: usize) {
    let bodylen = usize::from(extlen) + usize::from(keylen) + vlen;
    let mut h = [0u8; HEADER_LEN];
    h[0] = RESPONSE_MAGIC;
    h[1] = req.opcode;
    h[2..4].copy_from_slice(&keylen.to_be_bytes());
    h[4] = extlen;
    h[6..8].copy_from_slice(&(status as u16).to_be_bytes());
    // A value is at most `-I` (far below 4 GiB); saturate rather than wrap.
    h[8..12].copy_from_slice(&u32::try_from(bodylen).unwrap_or(u32::MAX).to_be_bytes());
    h[12..16].copy_from_slice(&req.opaque.to_be_bytes());
    h[16..24].copy_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(&h);
}

/// Appends a whole response packet.
pub fn packet(out: &mut Vec<u8>, req: &Header, status: Status, cas: u64, body: Body<'_>) {
    // Keys are at most 250 bytes and extras at most 8: the casts are exact.
    let (extlen, keylen) = (body.extras.len() as u8, body.key.len() as u16);
    out.reserve(HEADER_LEN + body.extras.len() + body.key.len() + body.value.len());
    header(out, req, status, cas, extlen, keylen, body.value.len());
    out.extend_from_slice(body.extras);
    out.extend_from_slice(body.key);
    out.extend_from_slice(body.value);
}

/// Appends an error response: the status and memcached's message as the value.
pub fn error(out: &mut Vec<u8>, req: &Header, status: Status) {
    packet(out, req, status, 0, Body { value: status.message(), ..Body::default() });
}
