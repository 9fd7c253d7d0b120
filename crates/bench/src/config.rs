//! What to run: workloads (the knobs of one measurement) and scenario files
//! (`bench/scenarios/*.toml`: servers, their equal memory and thread
//! settings, and a list of workloads). The command line builds a one-run
//! scenario from the same structures, so both paths measure alike.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::proto::Protocol;

/// Why a scenario could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Toml { path: String, source: Box<toml::de::Error> },
    #[error("{0}")]
    Invalid(String),
}

/// How key indices are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum KeyDist {
    Uniform,
    /// Zipf with this exponent (α); rank 1 is key 0.
    Zipf(f64),
    /// Keys `0, 1, 2, …` in order, wrapping at the key count, one sequence
    /// across all connections: with `ops` equal to `keys`, each key is
    /// requested exactly once (e.g. read back what the warm-up wrote once).
    Sequential,
}

impl FromStr for KeyDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "uniform" => Ok(KeyDist::Uniform),
            None if s == "sequential" => Ok(KeyDist::Sequential),
            Some(("zipf", a)) => a.parse().map(KeyDist::Zipf).map_err(|_| format!("bad zipf exponent {a:?}")),
            _ => Err(format!("key distribution {s:?}: expected uniform, sequential or zipf:<alpha>")),
        }
    }
}

impl TryFrom<String> for KeyDist {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<KeyDist> for String {
    fn from(d: KeyDist) -> String {
        d.to_string()
    }
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Sequential => f.write_str("sequential"),
            KeyDist::Zipf(a) => write!(f, "zipf:{a}"),
        }
    }
}

/// Smallest `api:` size: `{"id":…}` plus an empty text field fits.
pub const API_MIN: usize = 48;
/// Smallest `page:` size: the page header and one smallest object.
pub const PAGE_MIN: usize = 128;

/// Value sizes: `1000`, `32-4000` (uniform), `json:32-4000` (JSON-like
/// records whose sizes are uniform in the range), `api:150-200` (realistic
/// API-response objects) and `page:1500-1900` (listing pages of about ten
/// of them); see [`crate::gen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ValueSize {
    Fixed(usize),
    Range(usize, usize),
    /// Random bytes: what compression cannot shrink (images, ciphertext).
    Random(usize, usize),
    Json(usize, usize),
    Api(usize, usize),
    Page(usize, usize),
    /// `api:` objects for keys below the third number, then the same
    /// objects as a second version of the API writes them (camelCase field
    /// names, in an envelope): a schema change halfway through a stream.
    ApiChange(usize, usize, u64),
}

impl FromStr for ValueSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("value size {s:?}: expected N, LO-HI, random:LO-HI, json:LO-HI, api:LO-HI, api-change:LO-HI@KEY or page:LO-HI")
        };
        let range = |r: &str| -> Result<(usize, usize), String> {
            let (lo, hi) = r.split_once('-').ok_or_else(bad)?;
            let (lo, hi) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
            if lo > hi {
                return Err(bad());
            }
            Ok((lo, hi))
        };
        if let Some(r) = s.strip_prefix("random:") {
            let (lo, hi) = range(r)?;
            return Ok(ValueSize::Random(lo, hi));
        }
        if let Some(r) = s.strip_prefix("json:") {
            let (lo, hi) = range(r)?;
            return Ok(ValueSize::Json(lo, hi));
        }
        if let Some(r) = s.strip_prefix("api-change:") {
            let (r, at) = r.split_once('@').ok_or_else(bad)?;
            let (lo, hi) = range(r)?;
            if lo < API_MIN {
                return Err(format!("value size {s:?}: api values are at least {} bytes", API_MIN));
            }
            return Ok(ValueSize::ApiChange(lo, hi, at.parse().map_err(|_| bad())?));
        }
        if let Some(r) = s.strip_prefix("api:") {
            let (lo, hi) = range(r)?;
            if lo < API_MIN {
                return Err(format!("value size {s:?}: api values are at least {} bytes", API_MIN));
            }
            return Ok(ValueSize::Api(lo, hi));
        }
        if let Some(r) = s.strip_prefix("page:") {
            let (lo, hi) = range(r)?;
            if lo < PAGE_MIN {
                return Err(format!("value size {s:?}: page values are at least {} bytes", PAGE_MIN));
            }
            return Ok(ValueSize::Page(lo, hi));
        }
        if s.contains('-') {
            let (lo, hi) = range(s)?;
            return Ok(ValueSize::Range(lo, hi));
        }
        s.parse().map(ValueSize::Fixed).map_err(|_| bad())
    }
}

impl TryFrom<String> for ValueSize {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ValueSize> for String {
    fn from(v: ValueSize) -> String {
        v.to_string()
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSize::Fixed(n) => write!(f, "{n}"),
            ValueSize::Range(lo, hi) => write!(f, "{lo}-{hi}"),
            ValueSize::Random(lo, hi) => write!(f, "random:{lo}-{hi}"),
            ValueSize::Json(lo, hi) => write!(f, "json:{lo}-{hi}"),
            ValueSize::Api(lo, hi) => write!(f, "api:{lo}-{hi}"),
            ValueSize::ApiChange(lo, hi, at) => write!(f, "api-change:{lo}-{hi}@{at}"),
            ValueSize::Page(lo, hi) => write!(f, "page:{lo}-{hi}"),
        }
    }
}

/// Sets to gets, as `S:G` (`1:0` is write-only, `0:1` read-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Ratio {
    pub sets: u32,
    pub gets: u32,
}

impl Ratio {
    /// Probability that a request is a set.
    pub fn set_share(self) -> f64 {
        f64::from(self.sets) / f64::from(self.sets + self.gets)
    }
}

impl FromStr for Ratio {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("ratio {s:?}: expected SETS:GETS, e.g. 1:2");
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        let r = Ratio { sets: a.parse().map_err(|_| bad())?, gets: b.parse().map_err(|_| bad())? };
        if r.sets + r.gets == 0 {
            return Err(bad());
        }
        Ok(r)
    }
}

impl TryFrom<String> for Ratio {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Ratio> for String {
    fn from(r: Ratio) -> String {
        format!("{}:{}", r.sets, r.gets)
    }
}

/// The order in which a load run's warm-up sets every key once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FillOrder {
    /// Keys `0, 1, 2, …`: under a zipf key distribution the hottest key
    /// first, the coldest last.
    #[default]
    Keys,
    /// A permutation of the keys fixed by the seed: popularity and the
    /// order of arrival unrelated, as when traffic fills a cache.
    Shuffled,
}

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Throughput, latency and CPU per op for a request mix.
    Load,
    /// Write distinct keys until the server evicts; report items held.
    Capacity,
    /// Cache-aside (get, set on miss) over a key space larger than memory.
    HitRatio,
    /// A trace's requests in order (`replay`; gets set on a miss), hit
    /// ratio measured after the first `warmup_ops` lines (default: the
    /// warm-up the trace's JSON names).
    Replay,
}

/// One measurement's knobs. Defaults are in [`Workload::default`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    pub mode: Mode,
    /// Protocol used with memcached-compatible servers (Redis always RESP).
    pub protocol: Protocol,
    pub connections: usize,
    /// Client threads the connections are spread over.
    pub threads: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Keys per get request (1: plain get).
    pub multiget: u16,
    pub ratio: Ratio,
    /// Size of the key space.
    pub keys: u64,
    /// Key length in bytes (0: the smallest that keeps keys distinct).
    pub key_size: usize,
    pub key_dist: KeyDist,
    pub value_size: ValueSize,
    /// Measured duration (ignored when `ops` is set).
    pub duration_secs: f64,
    /// Stop after this many requests instead of a duration.
    pub ops: Option<u64>,
    /// Open loop: this many requests per second in total, latency measured
    /// from when each was due (corrected for coordinated omission).
    pub rate: Option<f64>,
    /// Set every key once before measuring (default: when the mix reads).
    pub warmup: Option<bool>,
    /// The order of that warm-up's sets.
    pub fill_order: FillOrder,
    /// Hit-ratio mode: requests before measuring starts.
    pub warmup_ops: u64,
    /// Capacity mode: keep writing this fraction beyond the first eviction.
    pub overfill: f64,
    pub seed: u64,
    /// Replay mode: the trace file (`crate::trace`'s format).
    pub replay: Option<std::path::PathBuf>,
    /// Replay mode: a get that misses is followed by a set of its key (the
    /// trace's [`crate::trace::Meta::fill_on_miss`], read with it).
    #[serde(skip)]
    pub replay_fills: bool,
    /// TTL classes in seconds (0: none): each key's sets carry one of
    /// them, the same every time ([`crate::gen::ttl_of`]). Empty: none.
    pub ttls: Vec<u32>,
    /// Hit-ratio mode: of every `scan_every` requests, the first
    /// `scan_keys` ask for cold keys never asked before (a batch job or a
    /// crawler passing once over other data). 0: no scan.
    pub scan_every: u64,
    pub scan_keys: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            name: String::new(),
            mode: Mode::Load,
            protocol: Protocol::Text,
            connections: 16,
            threads: 2,
            pipeline: 1,
            multiget: 1,
            ratio: Ratio { sets: 1, gets: 2 },
            keys: 100_000,
            key_size: 0,
            key_dist: KeyDist::Uniform,
            value_size: ValueSize::Fixed(1000),
            duration_secs: 10.0,
            ops: None,
            rate: None,
            warmup: None,
            fill_order: FillOrder::Keys,
            warmup_ops: 0,
            overfill: 0.1,
            seed: 1,
            replay: None,
            replay_fills: true,
            ttls: Vec::new(),
            scan_every: 0,
            scan_keys: 0,
        }
    }
}

/// Smallest key size that keeps `keys` indices distinct.
pub fn min_key_size(keys: u64) -> usize {
    itoa::Buffer::new().format(keys.saturating_sub(1)).len() + 1
}

impl Workload {
    pub fn key_size(&self) -> usize {
        match self.key_size {
            0 => min_key_size(self.keys).max(14),
            n => n,
        }
    }

    pub fn warms_up(&self) -> bool {
        self.mode == Mode::Load && self.warmup.unwrap_or(self.ratio.gets > 0)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(format!("workload {:?}: {m}", self.name)));
        if self.connections == 0 || self.threads == 0 || self.pipeline == 0 || self.multiget == 0 {
            return bad("connections, threads, pipeline and multiget must be at least 1".into());
        }
        if self.key_size != 0 && self.key_size < min_key_size(self.keys) {
            return bad(format!("key_size {} cannot hold {} distinct keys", self.key_size, self.keys));
        }
        if self.key_size() > 250 {
            return bad("keys over 250 bytes".into());
        }
        if let Some(r) = self.rate {
            if r.is_nan() || r <= 0.0 {
                return bad("rate must be positive".into());
            }
        }
        if self.scan_every > 0
            && (self.mode != Mode::HitRatio || self.scan_keys == 0 || self.scan_keys > self.scan_every)
        {
            return bad("a scan is for hit-ratio runs, with 1 <= scan_keys <= scan_every".into());
        }
        if (self.mode == Mode::Replay) != self.replay.is_some() {
            return bad("mode replay and a replay trace go together".into());
        }
        if self.duration_secs.is_nan() || self.duration_secs <= 0.0 && self.ops.is_none() {
            return bad("needs a positive duration_secs or ops".into());
        }
        Ok(())
    }
}

/// A server the bench can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ServerKind {
    Strata,
    /// strata with `-o compression=on`.
    #[serde(rename = "strata-zstd")]
    StrataZstd,
    Memcached,
    Redis,
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerKind::Strata => "strata",
            ServerKind::StrataZstd => "strata-zstd",
            ServerKind::Memcached => "memcached",
            ServerKind::Redis => "redis",
        })
    }
}

/// A scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "all_servers")]
    pub servers: Vec<ServerKind>,
    /// Memory limit given to every server (`-m`, `maxmemory`).
    #[serde(default = "default_memory")]
    pub memory_mb: u64,
    /// Worker threads given to every server (`-t`, Redis `io-threads`).
    #[serde(default = "default_threads")]
    pub server_threads: usize,
    /// Redis `io-threads` (see `server::Settings`).
    #[serde(default = "one")]
    pub redis_io_threads: usize,
    /// Workload fields shared by every run (a run's own fields win).
    #[serde(default)]
    pub defaults: toml::Table,
    #[serde(rename = "run")]
    pub runs: Vec<toml::Table>,
}

fn all_servers() -> Vec<ServerKind> {
    vec![ServerKind::Strata, ServerKind::Memcached, ServerKind::Redis]
}

fn default_memory() -> u64 {
    1024
}

fn default_threads() -> usize {
    2
}

fn one() -> usize {
    1
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: name.clone(), source })?;
        let s: Scenario = toml::from_str(&text)
            .map_err(|source| ConfigError::Toml { path: name.clone(), source: Box::new(source) })?;
        s.workloads()?;
        Ok(s)
    }

    /// Each run's workload: the defaults table overlaid with the run's own.
    pub fn workloads(&self) -> Result<Vec<Workload>, ConfigError> {
        self.runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                let mut table = self.defaults.clone();
                table.extend(run.clone());
                let mut w: Workload = toml::Value::Table(table)
                    .try_into()
                    .map_err(|e| ConfigError::Invalid(format!("{}: run {}: {e}", self.name, i + 1)))?;
                if w.name.is_empty() {
                    w.name = format!("run{}", i + 1);
                }
                w.validate()?;
                Ok(w)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knob_syntax() {
        assert_eq!("zipf:0.99".parse::<KeyDist>(), Ok(KeyDist::Zipf(0.99)));
        assert!("zipf".parse::<KeyDist>().is_err());
        assert_eq!("sequential".parse::<KeyDist>(), Ok(KeyDist::Sequential));
        assert_eq!(KeyDist::Sequential.to_string(), "sequential");
        assert_eq!("32-4000".parse::<ValueSize>(), Ok(ValueSize::Range(32, 4000)));
        assert_eq!("random:100-200".parse::<ValueSize>(), Ok(ValueSize::Random(100, 200)));
        assert_eq!(ValueSize::Random(100, 200).to_string(), "random:100-200");
        assert_eq!("json:100-200".parse::<ValueSize>(), Ok(ValueSize::Json(100, 200)));
        assert_eq!("api:150-200".parse::<ValueSize>(), Ok(ValueSize::Api(150, 200)));
        assert_eq!("page:1500-1900".parse::<ValueSize>(), Ok(ValueSize::Page(1500, 1900)));
        assert_eq!("api-change:100-250@5000".parse::<ValueSize>(), Ok(ValueSize::ApiChange(100, 250, 5000)));
        assert_eq!(ValueSize::ApiChange(100, 250, 5000).to_string(), "api-change:100-250@5000");
        assert!("api-change:100-250".parse::<ValueSize>().is_err());
        assert_eq!(ValueSize::Page(1500, 1900).to_string(), "page:1500-1900");
        assert!("api:10-200".parse::<ValueSize>().is_err());
        assert!("page:100-200".parse::<ValueSize>().is_err());
        assert!("api:300-200".parse::<ValueSize>().is_err());
        assert!("9-1".parse::<ValueSize>().is_err());
        assert_eq!("1:2".parse::<Ratio>(), Ok(Ratio { sets: 1, gets: 2 }));
        assert!("0:0".parse::<Ratio>().is_err());
    }

    #[test]
    fn scenario_defaults_are_overlaid() {
        let s: Scenario = toml::from_str(
            r#"
            name = "t"
            [defaults]
            value_size = "4000"
            ratio = "1:0"
            [[run]]
            connections = 8
            [[run]]
            name = "small"
            value_size = "100"
            "#,
        )
        .unwrap();
        let w = s.workloads().unwrap();
        assert_eq!((w[0].connections, w[0].value_size), (8, ValueSize::Fixed(4000)));
        assert_eq!((w[1].name.as_str(), w[1].value_size), ("small", ValueSize::Fixed(100)));
        assert!(!w[0].warms_up());
    }

    #[test]
    fn checked_in_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            Scenario::load(&entry.path()).unwrap();
            n += 1;
        }
        assert!(n >= 6, "expected the six scenario files in {}", dir.display());
    }
}
