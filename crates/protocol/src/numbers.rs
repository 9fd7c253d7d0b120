//! memcached's number parsing rules (`safe_strtoul`, `safe_strtol`,
//! `safe_strtoull` in memcached's `util.c`), reproduced exactly because clients
//! can observe them: a leading `+` is accepted, `-0` is zero, a flags value
//! above 2^32-1 wraps, and overflow is an error.

/// Parses an optional sign and at least one decimal digit spanning the whole
/// token. Returns (negative, magnitude), or `None` on junk or u64 overflow.
fn sign_and_magnitude(tok: &[u8]) -> Option<(bool, u64)> {
    let (neg, digits) = match tok.first()? {
        b'-' => (true, &tok[1..]),
        b'+' => (false, &tok[1..]),
        _ => (false, tok),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((neg, v))
}

/// `safe_strtoull`: a 64-bit unsigned number; a negative value is refused
/// unless it is so small that C's `strtoull` wraps it to a value that still
/// looks positive as a signed number (`-0`, for instance).
pub fn parse_u64(tok: &[u8]) -> Option<u64> {
    let (neg, mag) = sign_and_magnitude(tok)?;
    let v = if neg { mag.wrapping_neg() } else { mag };
    if neg && (v as i64) < 0 {
        return None;
    }
    Some(v)
}

/// `safe_strtoul` on a 64-bit platform: parsed as `unsigned long`, then
/// truncated to 32 bits, exactly as memcached stores client flags.
pub fn parse_u32(tok: &[u8]) -> Option<u32> {
    parse_u64(tok).map(|v| v as u32)
}

/// `safe_strtol` as memcached 1.6.18 has it: parsed as a 64-bit `long`
/// (refused only beyond that range, C's `ERANGE`), then truncated to 32 bits
/// by the assignment to an `int32_t`. So an exptime of 2^31 wraps to
/// -2^31 (expired at once), 2^32 to 0 (never expires), 2^32 + 1 to one
/// second; a value length of 2^32 + 1 reads one byte; `flush_all 4294967296`
/// flushes now. Clients that send such numbers get memcached's answers
/// (`STORED`, `TOUCHED`) instead of a `CLIENT_ERROR` that would leave their
/// data line to be read as a command.
pub fn parse_i32(tok: &[u8]) -> Option<i32> {
    let (neg, mag) = sign_and_magnitude(tok)?;
    let v: i64 = if neg {
        if mag > i64::MAX as u64 + 1 {
            return None;
        }
        (mag as i64).wrapping_neg()
    } else {
        i64::try_from(mag).ok()?
    };
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_rules() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-"), None);
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), Some(0));
    }

    #[test]
    fn signed_rules() {
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"x"), None);
        // Truncated to 32 bits, as memcached 1.6.18 does.
        assert_eq!(parse_i32(b"2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"4294967295"), Some(-1));
        assert_eq!(parse_i32(b"4294967296"), Some(0));
        assert_eq!(parse_i32(b"4294967297"), Some(1));
        assert_eq!(parse_i32(b"-2147483649"), Some(i32::MAX));
        assert_eq!(parse_i32(b"9223372036854775807"), Some(-1));
        assert_eq!(parse_i32(b"-9223372036854775808"), Some(0));
        // Beyond a 64-bit long: ERANGE.
        assert_eq!(parse_i32(b"9223372036854775808"), None);
        assert_eq!(parse_i32(b"-9223372036854775809"), None);
        assert_eq!(parse_i32(b"99999999999999999999"), None);
    }
}
