//! Request traces: the exact sequence of a hit-ratio run, written in a form
//! libCacheSim's CSV reader takes, and read back to replay against any
//! server (`mode = "replay"`).
//!
//! One line per key asked for or written, in the order the load threads
//! issued them (a multi-get gives one line per key):
//!
//! ```text
//! time,obj_id,obj_size,op,ttl
//! 1,1234,1014,get,0
//! ```
//!
//! `time` counts requests from 1, `obj_id` is the key's index (the key on
//! the wire is `k000…1234`), `obj_size` is key plus value bytes (what a
//! simulator without metadata charges an object), `op` is `get` or `set`,
//! `ttl` the seconds the key's sets give it (0: none; the replay sets with it).
//! The sets a cache-aside client sends after a miss are not lines: a
//! simulator inserts on a miss, and the replay sets after a miss too; a
//! trace of gets and sets mixed (`mode = "load"`, whose misses set nothing)
//! says so in its JSON ([`Meta::fill_on_miss`]), and neither inserts then. The
//! lines before the measured phase are the warm-up; their count goes in a
//! JSON file beside the trace (`<trace>.json`, [`Meta`]).
//! libCacheSim reads it with `has_header`, delimiter `,` and fields
//! 1 (time), 2 (obj_id), 3 (obj_size), 4 (op), 5 (ttl): `bench/policies.py`.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a trace line asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Get,
    Set,
}

/// One trace line, with the order it was issued in (`seq`, per phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    pub seq: u64,
    pub key: u64,
    /// Key plus value bytes.
    pub size: u32,
    pub op: Op,
    /// Seconds the key's sets give it (0: none).
    pub ttl: u32,
}

/// What goes beside a trace: where its measured part starts, and the run
/// it came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub scenario: String,
    pub workload: String,
    /// The server whose run was recorded (the interleaving of the load
    /// threads, and which gets missed, are that run's).
    pub server: String,
    pub memory_mb: u64,
    /// Lines before the measured phase.
    pub warmup: u64,
    /// Lines in all.
    pub requests: u64,
    pub key_size: usize,
    /// Whether a get that missed was followed by a set of its key
    /// (cache-aside: a simulator's insert on a miss is that set). False
    /// for a mix of gets and sets (`mode = "load"`), where a miss inserts
    /// nothing: a simulator then only looks the key up. Traces written
    /// before it was recorded were all cache-aside.
    #[serde(default = "cache_aside")]
    pub fill_on_miss: bool,
}

fn cache_aside() -> bool {
    true
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path}:{line}: {msg}")]
    Line { path: String, line: usize, msg: String },
}

/// Where the JSON beside `trace` goes.
pub fn meta_path(trace: &Path) -> PathBuf {
    let mut p = trace.as_os_str().to_owned();
    p.push(".json");
    PathBuf::from(p)
}

/// Writes `recs` (already in issue order) and their [`Meta`].
pub fn write(path: &Path, recs: &[Rec], meta: &Meta) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    out.write_all(b"time,obj_id,obj_size,op,ttl\n")?;
    let mut n = itoa::Buffer::new();
    for (i, r) in recs.iter().enumerate() {
        out.write_all(n.format(i as u64 + 1).as_bytes())?;
        out.write_all(b",")?;
        out.write_all(n.format(r.key).as_bytes())?;
        out.write_all(b",")?;
        out.write_all(n.format(r.size).as_bytes())?;
        out.write_all(match r.op {
            Op::Get => b",get,",
            Op::Set => b",set,",
        })?;
        out.write_all(n.format(r.ttl).as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    let json = serde_json::to_vec_pretty(meta).map_err(io::Error::other)?;
    std::fs::write(meta_path(path), json)
}

/// Reads a trace in this format (a header line, then at least the first
/// four fields; more are ignored). Only `get` and `set` lines are kept:
/// other operations (`delete`…) are counted and left out, as a cache of
/// this kind has no use for them in a replay of hit ratios.
pub fn read(path: &Path) -> Result<(Vec<Rec>, u64), TraceError> {
    let name = || path.display().to_string();
    let file = File::open(path).map_err(|source| TraceError::Io { path: name(), source })?;
    let mut recs = Vec::new();
    let mut skipped = 0;
    for (i, line) in BufReader::with_capacity(1 << 20, file).lines().enumerate() {
        let line = line.map_err(|source| TraceError::Io { path: name(), source })?;
        if i == 0 || line.is_empty() {
            continue;
        }
        let bad = |msg: &str| TraceError::Line { path: name(), line: i + 1, msg: msg.to_owned() };
        let mut f = line.split(',');
        let (_time, key, size, op, ttl) = (f.next(), f.next(), f.next(), f.next(), f.next());
        let key = key.and_then(|k| k.trim().parse().ok()).ok_or_else(|| bad("obj_id is not a number"))?;
        let size: u32 = size.and_then(|s| s.trim().parse().ok()).ok_or_else(|| bad("obj_size is not a number"))?;
        let op = match op.map(str::trim) {
            Some("get") | Some("gets") => Op::Get,
            Some("set") | Some("add") | Some("replace") | Some("cas") => Op::Set,
            Some(_) => {
                skipped += 1;
                continue;
            }
            None => return Err(bad("no op field")),
        };
        let ttl = match ttl.map(str::trim) {
            None | Some("") => 0,
            Some(t) => t.parse().map_err(|_| bad("ttl is not a number"))?,
        };
        recs.push(Rec { seq: recs.len() as u64, key, size, op, ttl });
    }
    Ok((recs, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_trace_reads_back_with_its_meta() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let recs = vec![
            Rec { seq: 0, key: 7, size: 1014, op: Op::Set, ttl: 0 },
            Rec { seq: 1, key: 7, size: 1014, op: Op::Get, ttl: 300 },
            Rec { seq: 2, key: 123_456, size: 40, op: Op::Get, ttl: 0 },
        ];
        let meta = Meta { warmup: 1, requests: 3, key_size: 14, fill_on_miss: false, ..Meta::default() };
        write(&path, &recs, &meta).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "time,obj_id,obj_size,op,ttl\n1,7,1014,set,0\n2,7,1014,get,300\n3,123456,40,get,0\n");
        assert_eq!(read(&path).unwrap(), (recs, 0));
        let back: Meta = serde_json::from_slice(&std::fs::read(meta_path(&path)).unwrap()).unwrap();
        assert_eq!(back, meta);
        // A trace's JSON from before the field was written: cache-aside.
        std::fs::write(
            meta_path(&path),
            r#"{"scenario":"s","workload":"w","server":"strata","memory_mb":64,"warmup":1,"requests":3,"key_size":14}"#,
        )
        .unwrap();
        let old: Meta = serde_json::from_slice(&std::fs::read(meta_path(&path)).unwrap()).unwrap();
        assert!(old.fill_on_miss);
    }

    #[test]
    fn other_operations_are_counted_and_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, "time,obj_id,obj_size,op,ttl\n1,5,100,delete,0\n2,5,100,get,0\n").unwrap();
        let (recs, skipped) = read(&path).unwrap();
        assert_eq!((recs.len(), skipped), (1, 1));
        std::fs::write(&path, "h\n1,x,100,get,0\n").unwrap();
        assert!(matches!(read(&path), Err(TraceError::Line { line: 2, .. })));
    }
}
