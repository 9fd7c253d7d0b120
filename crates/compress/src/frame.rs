//! The stored form drawn in the crate doc: reading its header (dictionary
//! id, original length) without decompressing, the zstd contexts, and the
//! shared helpers (counters, a dictionary's memory, its held-out ratio, a
//! random-looking value).

use super::*;

pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// A dictionary's bytes and zstd's prepared forms of it (their tables).
pub(crate) fn memory_of(d: &Dict) -> usize {
    d.raw.len() + d.cdict.sizeof() + d.ddict.sizeof()
}

/// Compression ratio of `dict` on held-out samples (1.0 if there are none).
pub(crate) fn held_out_ratio(cfg: &Config, dict: &Dict, data: &[u8], sizes: &[usize]) -> Result<f64, CompressError> {
    let mut cctx = new_cctx(cfg.level)?;
    cctx.ref_cdict(&dict.cdict).map_err(zstd_err)?;
    let (mut inb, mut outb, mut at) = (0usize, 0usize, 0usize);
    let mut out = Vec::new();
    for &n in sizes {
        let v = &data[at..at + n];
        at += n;
        out.clear();
        out.reserve(zstd_safe::compress_bound(n));
        let len = cctx.compress2(&mut out, v).map_err(zstd_err)?;
        inb += n;
        // As stored: the FHD rides in the id byte.
        outb += len;
    }
    // The context must not outlive its reference to the dictionary.
    cctx.disable_dictionary().map_err(zstd_err)?;
    Ok(if outb == 0 { 1.0 } else { inb as f64 / outb as f64 })
}

pub(crate) fn zstd_err(code: usize) -> CompressError {
    CompressError::Zstd(zstd_safe::get_error_name(code))
}

pub(crate) fn new_cctx(level: i32) -> Result<CCtx<'static>, CompressError> {
    let mut c = CCtx::create();
    for p in [
        CParameter::CompressionLevel(level),
        CParameter::Format(FrameFormat::Magicless),
        CParameter::ContentSizeFlag(true),
        CParameter::ChecksumFlag(false),
        CParameter::DictIdFlag(false),
    ] {
        c.set_parameter(p).map_err(zstd_err)?;
    }
    Ok(c)
}

pub(crate) fn new_dctx() -> Result<DCtx<'static>, CompressError> {
    let mut d = DCtx::create();
    d.set_parameter(DParameter::Format(FrameFormat::Magicless)).map_err(zstd_err)?;
    Ok(d)
}

/// The dictionary id, the frame's FHD, where the rest of the frame starts,
/// and the original length, from a stored form (the FHD: RFC 8878,
/// 3.1.1.1.1).
pub(crate) fn read_header(stored: &[u8]) -> Result<(u8, u8, usize, usize), CompressError> {
    let &first = stored.first().ok_or(CompressError::Malformed)?;
    let (id, code) = (first & MAX_DICT_ID, first >> 6);
    let (fhd, at) = match IMPLIED_FHD.get(usize::from(code)) {
        Some(&fhd) => (fhd, 1),
        None => (*stored.get(1).ok_or(CompressError::Malformed)?, 2),
    };
    // A dictionary id field or the reserved bit: not a frame of ours.
    if fhd & 0b11 != 0 || fhd & 0b1000 != 0 {
        return Err(CompressError::Malformed);
    }
    let single_segment = fhd & 0x20 != 0;
    let size_len = match (fhd >> 6, single_segment) {
        (0, true) => 1,
        (0, false) => return Err(CompressError::Malformed),
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let size_at = at + usize::from(!single_segment);
    let field = stored.get(size_at..size_at + size_len).ok_or(CompressError::Malformed)?;
    let mut n = field.iter().rev().fold(0u64, |n, &b| n << 8 | u64::from(b));
    if size_len == 2 {
        n += 256;
    }
    Ok((id, fhd, at, usize::try_from(n).map_err(|_| CompressError::Malformed)?))
}

/// The dictionary id a stored form names (each form holds a reference to
/// it from [`Ctx::compress`] until given back with [`Codec::release`]).
pub fn dict_id(stored: &[u8]) -> u8 {
    stored.first().map_or(NO_DICT, |b| b & MAX_DICT_ID)
}

/// The stored form's header bits for a frame: which implied FHD it starts
/// with, or [`FULL_FHD`].
pub(crate) fn header_code(frame: &[u8]) -> u8 {
    frame.first().and_then(|f| IMPLIED_FHD.iter().position(|i| i == f)).map_or(FULL_FHD, |c| c as u8)
}

/// The original length of a stored compressed value, without decompressing.
pub fn original_len(stored: &[u8]) -> Result<usize, CompressError> {
    read_header(stored).map(|(.., n)| n)
}

/// Whether `v` looks like random or already compressed bytes: in its
/// first 256 bytes, many distinct byte values (random bytes show ~162 of
/// 256; text and JSON 30–70). Costs ~100 ns, against a few µs for a zstd
/// attempt that would not pay.
pub(crate) fn looks_random(v: &[u8]) -> bool {
    let head = &v[..v.len().min(256)];
    let mut seen = [false; 256];
    let mut distinct = 0usize;
    for &b in head {
        if !seen[b as usize] {
            seen[b as usize] = true;
            distinct += 1;
        }
    }
    // Scaled to the sample: expected distinct for n random bytes is
    // 256 (1 - (255/256)^n); flag anything above ~3/4 of that.
    let expected = 256.0 * (1.0 - (255.0f64 / 256.0).powi(head.len() as i32));
    distinct as f64 > expected * 0.75 && head.len() >= 32
}
