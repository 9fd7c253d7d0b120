//! memcached's `-o` options (`-o hashpower=20,no_lru_crawler,…`): each
//! checked with its wording; the flash tier's (`ext.rs`), TLS's (`tls.rs`)
//! and the tuning settings strata only records (`tuning.rs`) are handed to
//! their modules.

use strata_server::IoBackend;

use crate::error::ConfigError;

/// The `-o` settings, checked.
pub(crate) struct ExtendedOpts {
    pub(crate) hash_power: u32,
    pub(crate) max_get_line: usize,
    pub(crate) io: IoBackend,
    pub(crate) io_buffers: u16,
    pub(crate) compression: bool,
    pub(crate) idle_timeout: u32,
    pub(crate) background_reclaim: bool,
    pub(crate) read_buf_mem_limit: Option<usize>,
    pub(crate) tls: crate::tls::TlsOptions,
    /// The flash tier's, the compressor's and the tuning options, which
    /// their own modules check and finish.
    pub(crate) ext: crate::ext::ExtOptions,
    pub(crate) zcfg: strata_compress::Config,
    pub(crate) tuning: crate::tuning::Tuning,
}

/// The `-o` options, each checked; the flash tier's, TLS's and the
/// tuning ones each by its own module.
pub(crate) fn parse(extended: &[String]) -> Result<ExtendedOpts, ConfigError> {
    let mut hash_power = 0;
    let mut max_get_line = 1 << 20;
    let mut io = IoBackend::Auto;
    let mut io_buffers = 64;
    let mut compression = COMPRESSION_DEFAULT;
    let mut zcfg = strata_compress::Config::default();
    let mut ext = crate::ext::ExtOptions::default();
    let mut idle_timeout = 0;
    let mut background_reclaim = true;
    let mut read_buf_mem_limit: Option<usize> = None;
    let mut tls = crate::tls::TlsOptions::default();
    let mut tuning = crate::tuning::Tuning::default();
    for opt in extended.iter().flat_map(|o| o.split(',')).filter(|o| !o.is_empty()) {
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        match k {
            "hashpower" => {
                hash_power = v
                    .parse::<u32>()
                    .ok()
                    .filter(|p| (12..=32).contains(p))
                    .ok_or_else(|| format!("invalid hashpower {v:?} (12 to 32)"))?
            }
            "max_get_line" => {
                max_get_line = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 2048)
                    .ok_or_else(|| format!("invalid max_get_line {v:?} (at least 2048)"))?
            }
            "io" => {
                io = match v {
                    "auto" => IoBackend::Auto,
                    "uring" | "io_uring" => IoBackend::Uring,
                    "epoll" => IoBackend::Epoll,
                    _ => return Err(format!("invalid io {v:?} (auto, uring or epoll)").into()),
                }
            }
            "io_buffers" => {
                io_buffers = v
                    .parse::<u16>()
                    .ok()
                    .filter(|n| n.is_power_of_two() && (2..=4096).contains(n))
                    .ok_or_else(|| format!("invalid io_buffers {v:?} (a power of two, 2 to 4096)"))?
            }
            "compression" => {
                compression = match v {
                    "on" | "1" | "yes" => true,
                    "off" | "0" | "no" => false,
                    _ => return Err(format!("invalid compression {v:?} (on or off)").into()),
                }
            }
            "idle_timeout" => idle_timeout = number(k, v)?,
            // memcached's LRU maintainer thread; strata's is the
            // background reclaimer.
            "lru_maintainer" => background_reclaim = true,
            // memcached's bundle: it also turns off its crawler and its
            // LRU maintainer (t/lru-crawler.t starts with it).
            "no_modern" => {
                background_reclaim = false;
                tuning.cfg.crawler = false;
                tuning.no_modern();
            }
            "no_lru_maintainer" => background_reclaim = false,
            "read_buf_mem_limit" => read_buf_mem_limit = Some(number(k, v)?),
            // The crawler `lru_crawler crawl` starts (admin.rs).
            "lru_crawler" => tuning.cfg.crawler = true,
            "no_lru_crawler" => tuning.cfg.crawler = false,
            "lru_crawler_sleep" => {
                tuning.cfg.crawler_sleep_us = number::<u32>(k, v)
                    .ok()
                    .filter(|us| *us <= 1_000_000)
                    .ok_or_else(|| format!("invalid lru_crawler_sleep {v:?} (0 to 1000000 microseconds)"))?
            }
            "lru_crawler_tocrawl" => tuning.cfg.crawler_tocrawl = number(k, v)?,
            // memcached's proxy (a build option there) routes requests
            // to other servers; strata serves them itself, and taking
            // the option silently would answer from the wrong place.
            "proxy_config" | "proxy_arg" | "proxy_uring" => {
                return Err(format!(
                    "-o {k}: strata is a cache server, not memcached's proxy; run a proxy in front of it"
                )
                .into())
            }
            "compression_level" => zcfg.level = number(k, v)?,
            "compression_min_size" => zcfg.min_size = parse_size(v)?,
            "compression_min_saving" => zcfg.min_saving_percent = number(k, v)?,
            "compression_dict_size" => zcfg.dict_size = parse_size(v)?,
            "compression_train_bytes" => zcfg.train_bytes = parse_size(v)?,
            "compression_sample" => zcfg.sample_one_in = number(k, v)?,
            "compression_retrain_drop" => zcfg.retrain_drop_percent = number(k, v)?,
            "compression_cold_level" => zcfg.cold_level = number(k, v)?,
            "compression_cold_cpu" => zcfg.cold_cpu_percent = number(k, v)?,
            _ if tls.take(k, v)? => {}
            _ if ext.take(k, v)? => {}
            _ if tuning.take(k, v)? => {}
            _ => return Err(format!("unknown extended option {k:?} (-o)").into()),
        }
    }
    Ok(ExtendedOpts {
        hash_power,
        max_get_line,
        io,
        io_buffers,
        compression,
        idle_timeout,
        background_reclaim,
        read_buf_mem_limit,
        tls,
        ext,
        zcfg,
        tuning,
    })
}

/// Whether values are stored compressed unless `-o compression=` says
/// otherwise (the measurements behind the choice: docs/benchmarks.md).
pub(crate) const COMPRESSION_DEFAULT: bool = false;

/// An extended option's number.
pub(crate) fn number<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("invalid {k} {v:?} (a number)"))
}

/// memcached's -I syntax: a number with an optional k/m/g suffix.
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let bad = || format!("invalid item size {s:?} (use e.g. 1m, 512k or a byte count)");
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(bad)
}
