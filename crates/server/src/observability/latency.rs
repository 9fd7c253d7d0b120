//! Request latency by command family, for `/metrics` (memcached has no
//! such histogram): the time from a parsed request to its reply written,
//! inside the server (the network and the queue before it are not in it).
//! Kept per worker, written only by its worker (plain load and store),
//! and only with `--metrics-listen`: reading the clock twice per request
//! is not free.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The families a request is counted under.
pub(crate) const FAMILIES: [&str; 6] = ["get", "set", "delete", "arith", "touch", "other"];

/// Upper bounds of the buckets, in nanoseconds (the last is +Inf).
pub(crate) const BOUNDS_NS: [u64; 11] =
    [1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 10_000_000];

/// One worker's histograms.
#[derive(Debug, Default)]
pub(crate) struct Latency {
    /// Per family: requests per bucket (not cumulative), +Inf last.
    pub buckets: [[AtomicU64; BOUNDS_NS.len() + 1]; FAMILIES.len()],
    pub sum_ns: [AtomicU64; FAMILIES.len()],
}

impl Latency {
    pub fn record(&self, family: usize, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let b = BOUNDS_NS.iter().position(|&hi| ns <= hi).unwrap_or(BOUNDS_NS.len());
        let (Some(row), Some(sum)) = (self.buckets.get(family), self.sum_ns.get(family)) else { return };
        crate::observability::inc(&row[b]);
        sum.store(sum.load(Relaxed).wrapping_add(ns), Relaxed);
    }
}

/// The family of the request at the front of `buf` (text: its command
/// name; binary: its opcode).
pub(crate) fn family_text(buf: &[u8]) -> usize {
    let name = buf.split(|&b| b == b' ' || b == b'\r' || b == b'\n').next().unwrap_or_default();
    match name {
        b"get" | b"gets" | b"gat" | b"gats" | b"mg" | b"bget" => 0,
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"ms" => 1,
        b"delete" | b"md" => 2,
        b"incr" | b"decr" | b"ma" => 3,
        b"touch" => 4,
        _ => 5,
    }
}

pub(crate) fn family_binary(buf: &[u8]) -> usize {
    use strata_protocol::binary::opcode::*;
    match buf.get(1).copied().unwrap_or(0xff) {
        GET | GETQ | GETK | GETKQ | GAT | GATQ | GATK | GATKQ => 0,
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ => 1,
        DELETE | DELETEQ => 2,
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => 3,
        TOUCH => 4,
        _ => 5,
    }
}

/// Renders every worker's histograms, summed, in Prometheus' text format.
pub(crate) fn prometheus(out: &mut Vec<u8>, workers: &[&Latency]) {
    use std::io::Write;
    let name = "strata_request_duration_seconds";
    let _ = write!(
        out,
        "# HELP {name} Time from a parsed request to its reply, inside the server, by command family.\n# TYPE {name} histogram\n"
    );
    for (f, family) in FAMILIES.iter().enumerate() {
        let mut cumulative = 0u64;
        for (b, hi) in BOUNDS_NS.iter().map(Some).chain([None]).enumerate() {
            cumulative += workers.iter().map(|w| w.buckets[f][b].load(Relaxed)).sum::<u64>();
            let le = hi.map_or("+Inf".to_string(), |&ns| format!("{}", ns as f64 / 1e9));
            let _ = writeln!(out, "{name}_bucket{{family=\"{family}\",le=\"{le}\"}} {cumulative}");
        }
        let sum: u64 = workers.iter().map(|w| w.sum_ns[f].load(Relaxed)).sum();
        let _ = writeln!(out, "{name}_sum{{family=\"{family}\"}} {}", sum as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{{family=\"{family}\"}} {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_with_sum_and_count() {
        let l = Latency::default();
        l.record(0, Duration::from_nanos(800));
        l.record(0, Duration::from_micros(30));
        l.record(0, Duration::from_secs(1));
        l.record(2, Duration::from_micros(3));
        let mut out = Vec::new();
        prometheus(&mut out, &[&l, &Latency::default()]);
        let text = String::from_utf8(out).unwrap_or_default();
        let n = "strata_request_duration_seconds";
        assert!(text.contains(&format!("{n}_bucket{{family=\"get\",le=\"0.000001\"}} 1\n")), "{text}");
        assert!(text.contains(&format!("{n}_bucket{{family=\"get\",le=\"0.00005\"}} 2\n")));
        assert!(text.contains(&format!("{n}_bucket{{family=\"get\",le=\"+Inf\"}} 3\n")));
        assert!(text.contains(&format!("{n}_count{{family=\"get\"}} 3\n")));
        assert!(text.contains(&format!("{n}_bucket{{family=\"delete\",le=\"0.0000025\"}} 0\n")));
        assert!(text.contains(&format!("{n}_bucket{{family=\"delete\",le=\"0.000005\"}} 1\n")));
        assert_eq!((family_text(b"gets a b\r\n"), family_text(b"ms k 2\r\n"), family_text(b"version\r\n")), (0, 1, 5));
        assert_eq!(family_binary(&[0x80, strata_protocol::binary::opcode::DELETEQ]), 2);
    }
}
