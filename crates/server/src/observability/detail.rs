//! Per-prefix request counts: memcached's `stats detail on|off|dump` and
//! `-D <delimiter>`. A key's prefix is what comes before its first
//! delimiter (`:` unless `-D` says otherwise); keys without one are not
//! counted. Classic text `get`/`gets`/`gat`/`gats` count as gets (and hits),
//! the classic stores as sets, `delete` as deletes, and the binary
//! protocol's GET, GAT and TOUCH families, stores and DELETE the same way;
//! meta commands and text `touch` are not counted, as in memcached 1.6.
//!
//! Off (the default), a request pays one relaxed load. On, every counted
//! request takes one global lock, as memcached's does: it is a diagnostic
//! for an operator to switch on for a while, not an always-on metric. At
//! most [`MAX_PREFIXES`] prefixes are tracked (memcached's bound); keys of
//! further prefixes go uncounted, so a client inventing prefixes cannot
//! grow the table without bound.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use parking_lot::Mutex;

/// Prefixes tracked at most.
pub(crate) const MAX_PREFIXES: usize = 1 << 16;

/// Counts of one prefix.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

/// The per-prefix counters of a server.
#[derive(Debug)]
pub(crate) struct Detail {
    on: AtomicBool,
    delimiter: u8,
    prefixes: Mutex<HashMap<Box<[u8]>, Counts>>,
}

impl Detail {
    pub(crate) fn new(delimiter: u8, on: bool) -> Detail {
        Detail { on: AtomicBool::new(on), delimiter, prefixes: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.on.load(Relaxed)
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    pub(crate) fn delimiter(&self) -> u8 {
        self.delimiter
    }

    pub(crate) fn record_get(&self, key: &[u8], hit: bool) {
        self.record(key, |c| {
            c.gets += 1;
            c.hits += u64::from(hit);
        });
    }

    pub(crate) fn record_set(&self, key: &[u8]) {
        self.record(key, |c| c.sets += 1);
    }

    pub(crate) fn record_delete(&self, key: &[u8]) {
        self.record(key, |c| c.deletes += 1);
    }

    fn record(&self, key: &[u8], f: impl FnOnce(&mut Counts)) {
        if !self.enabled() {
            return;
        }
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else { return };
        let prefix = &key[..end];
        let mut map = self.prefixes.lock();
        if let Some(c) = map.get_mut(prefix) {
            f(c);
        } else if map.len() < MAX_PREFIXES {
            f(map.entry(prefix.into()).or_default());
        }
    }

    /// `stats reset`.
    pub(crate) fn clear(&self) {
        self.prefixes.lock().clear();
    }

    /// `stats detail dump`: a line per prefix, sorted, then `END`
    /// (memcached lists them in its hash table's order).
    pub(crate) fn dump(&self) -> Vec<u8> {
        let mut rows: Vec<(Box<[u8]>, Counts)> = self.prefixes.lock().iter().map(|(k, c)| (k.clone(), *c)).collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::new();
        for (prefix, c) in rows {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(&prefix);
            // Writing into a Vec cannot fail.
            let _ = write!(out, " get {} hit {} set {} del {}\r\n", c.gets, c.hits, c.sets, c.deletes);
        }
        out.extend_from_slice(strata_protocol::reply::text::END);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix_only_while_on() {
        let d = Detail::new(b':', false);
        d.record_get(b"a:1", true);
        assert_eq!(d.dump(), b"END\r\n");
        d.set_enabled(true);
        d.record_get(b"a:1", true);
        d.record_get(b"a:2", false);
        d.record_set(b"b:x:y");
        d.record_delete(b"a:3");
        d.record_set(b":empty");
        d.record_get(b"nodelimiter", true);
        assert_eq!(
            d.dump(),
            b"PREFIX  get 0 hit 0 set 1 del 0\r\nPREFIX a get 2 hit 1 set 0 del 1\r\n\
              PREFIX b get 0 hit 0 set 1 del 0\r\nEND\r\n"
        );
        d.clear();
        assert_eq!(d.dump(), b"END\r\n");
    }

    #[test]
    fn prefixes_are_bounded() {
        let d = Detail::new(b'/', true);
        for i in 0..MAX_PREFIXES + 10 {
            d.record_set(format!("p{i}/k").as_bytes());
        }
        assert_eq!(d.prefixes.lock().len(), MAX_PREFIXES);
        // Known prefixes still count.
        d.record_get(b"p0/k", true);
        assert_eq!(d.prefixes.lock().get(&b"p0"[..]).map(|c| (c.gets, c.hits, c.sets)), Some((1, 1, 1)));
    }
}
