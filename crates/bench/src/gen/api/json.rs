//! JSON pieces: keys, strings, numbers, decimals, ids, times and slugs,
//! appended to a value being built.

use super::*;

// ---------------------------------------------------------------------------
// JSON pieces

pub(super) fn key(out: &mut Vec<u8>, k: &str) {
    out.push(b'"');
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

/// `"k":"s"`; every generated string is free of quotes, backslashes and
/// control characters, so none needs escaping.
pub(super) fn kv_str(out: &mut Vec<u8>, k: &str, s: &str) {
    key(out, k);
    quoted(out, s);
}

pub(super) fn quoted(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

pub(super) fn kv_num(out: &mut Vec<u8>, k: &str, n: u64) {
    key(out, k);
    num(out, n);
}

pub(super) fn num(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

pub(super) fn kv_null(out: &mut Vec<u8>, k: &str) {
    key(out, k);
    out.extend_from_slice(b"null");
}

pub(super) fn kv_bool(out: &mut Vec<u8>, k: &str, b: bool) {
    key(out, k);
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// A decimal with `places` digits, printed the way JSON serializers print
/// floats: trailing zeros dropped (`24.9`, `25`).
pub(super) fn decimal(out: &mut Vec<u8>, scaled: u64, places: u32) {
    let unit = 10u64.pow(places);
    num(out, scaled / unit);
    let mut frac = scaled % unit;
    if frac == 0 {
        return;
    }
    let mut digits = places;
    while frac.is_multiple_of(10) {
        frac /= 10;
        digits -= 1;
    }
    out.push(b'.');
    let s = itoa::Buffer::new().format(frac).len() as u32;
    out.resize(out.len() + (digits - s) as usize, b'0');
    num(out, frac);
}

pub(super) fn kv_decimal(out: &mut Vec<u8>, k: &str, scaled: u64, places: u32) {
    key(out, k);
    decimal(out, scaled, places);
}

pub(super) fn hex(out: &mut Vec<u8>, rng: &mut SmallRng, digits: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bits = 0u64;
    for i in 0..digits {
        if i % 16 == 0 {
            bits = rng.next_u64();
        }
        out.push(HEX[(bits & 15) as usize]);
        bits >>= 4;
    }
}

/// A version-4 UUID.
pub(super) fn uuid(out: &mut Vec<u8>, rng: &mut SmallRng) {
    let at = out.len();
    for (i, group) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if i > 0 {
            out.push(b'-');
        }
        hex(out, rng, group);
    }
    out[at + 14] = b'4';
    out[at + 19] = b"89ab"[rng.random_range(0..4)];
}

/// Unix seconds as ISO-8601 UTC, `2024-03-12T08:14:55Z`, with
/// milliseconds when asked (`…:55.123Z`).
pub(super) fn iso8601(out: &mut Vec<u8>, secs: u64, millis: Option<u32>) {
    let (y, m, d) = civil_from_days(secs / 86_400);
    let t = secs % 86_400;
    num(out, y);
    for (sep, n) in [(b'-', m), (b'-', d), (b'T', t / 3600), (b':', t / 60 % 60), (b':', t % 60)] {
        out.push(sep);
        two(out, n);
    }
    if let Some(ms) = millis {
        out.push(b'.');
        out.push(b'0' + (ms / 100 % 10) as u8);
        two(out, u64::from(ms % 100));
    }
    out.push(b'Z');
}

pub(super) fn kv_time(out: &mut Vec<u8>, k: &str, secs: u64, millis: Option<u32>) {
    key(out, k);
    out.push(b'"');
    iso8601(out, secs, millis);
    out.push(b'"');
}

pub(super) fn two(out: &mut Vec<u8>, n: u64) {
    out.push(b'0' + (n / 10 % 10) as u8);
    out.push(b'0' + (n % 10) as u8);
}

/// Gregorian (year, month, day) of a count of days since 1970-01-01, by
/// counting 400-year eras from 0000-03-01 so leap days fall at era ends.
pub(super) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

/// Lower-case ASCII slug of a display name (`Zoë Müller` → `zoe-muller`);
/// the lists' accents are all Latin-1 letters.
pub(super) fn slug(out: &mut Vec<u8>, s: &str, sep: u8) {
    let mut pending = false;
    for ch in s.chars() {
        let c = match ch {
            'á' | 'à' | 'â' | 'ã' | 'ä' => 'a',
            'é' | 'è' | 'ê' | 'ë' => 'e',
            'í' | 'ï' => 'i',
            'ó' | 'ô' | 'ö' | 'ø' => 'o',
            'ú' | 'ü' => 'u',
            'ñ' => 'n',
            'ç' => 'c',
            c => c.to_ascii_lowercase(),
        };
        if c.is_ascii_alphanumeric() {
            if pending {
                out.push(sep);
                pending = false;
            }
            out.push(c as u8);
        } else {
            pending = true;
        }
    }
}
