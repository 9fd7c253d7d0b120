//! memcached's extstore options (`-o ext_path=PATH:SIZE,ext_*=...`) and
//! the flash tier they open: each path is a file (created, sparse) or a
//! block device, cut into regions (docs/flash.md).

use std::path::PathBuf;
use std::sync::Arc;

use strata_flash::Flash;
use strata_io::{Backend, OsBackend};
use strata_store::FlashTier;

use crate::error::ConfigError;

/// What the `ext_*` options said.
#[derive(Debug, Default)]
pub struct ExtOptions {
    paths: Vec<(PathBuf, u64)>,
    /// Bytes (memcached: `ext_item_size`, default 512).
    item_size: Option<usize>,
    /// MiB (memcached: `ext_wbuf_size`, default 4).
    wbuf_mib: Option<u64>,
    /// MiB (memcached: `ext_page_size`, default 64).
    page_mib: Option<u64>,
    /// memcached's `ext_recache_rate`.
    recache_rate: Option<u32>,
    /// memcached's `ext_threads`: I/O threads reading from flash.
    threads: Option<usize>,
    /// memcached's `ext_item_age`, seconds.
    item_age: Option<u32>,
    /// The options accepted without effect, as given (for `stats
    /// settings`).
    noted: Vec<(String, String)>,
    /// The tier's options as given, for the log should there be no tier.
    given: Vec<String>,
}

/// Accepted so a memcached command line starts unchanged; what they tune
/// does not exist here (docs/protocol.md, the flash tier): strata's regions
/// are reclaimed oldest first, with read items written again, and there is
/// no compaction, no low-TTL page bucket and no write thread to pace. Shown
/// in `stats settings` as given.
const NOTED: &[&str] = &[
    "ext_io_depth",
    "ext_compact_under",
    "ext_drop_under",
    "ext_drop_unread",
    "ext_max_frag",
    "ext_max_sleep",
    "ext_low_ttl",
];

/// The most `ext_threads` allows.
const THREADS_MAX: usize = 64;

/// memcached's size syntax for `ext_path`: a number with an optional
/// K/M/G/T suffix.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid ext_path size {s:?} (e.g. 64G, 512M)");
    let (num, shift) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 30),
        Some('t' | 'T') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(1 << shift)).ok_or_else(bad)
}

fn mib(k: &str, v: &str) -> Result<u64, String> {
    v.parse::<u64>().ok().filter(|n| (1..=1024).contains(n)).ok_or_else(|| format!("invalid {k} {v:?} (megabytes)"))
}

impl ExtOptions {
    /// Takes option `k=v` if it is an extstore one; false if it is not.
    pub fn take(&mut self, k: &str, v: &str) -> Result<bool, String> {
        match k {
            "ext_path" => {
                let (path, size) = v.rsplit_once(':').ok_or_else(|| format!("invalid ext_path {v:?} (PATH:SIZE)"))?;
                if path.is_empty() {
                    return Err(format!("invalid ext_path {v:?} (PATH:SIZE)"));
                }
                self.paths.push((PathBuf::from(path), parse_bytes(size)?));
            }
            "ext_item_size" => {
                self.item_size = Some(v.parse().map_err(|_| format!("invalid ext_item_size {v:?} (bytes)"))?)
            }
            "ext_wbuf_size" => self.wbuf_mib = Some(mib(k, v)?),
            "ext_page_size" => self.page_mib = Some(mib(k, v)?),
            "ext_recache_rate" => {
                self.recache_rate = Some(v.parse().map_err(|_| format!("invalid ext_recache_rate {v:?} (a count)"))?)
            }
            "ext_threads" => {
                let n = v.parse().ok().filter(|n| *n <= THREADS_MAX);
                self.threads = Some(n.ok_or_else(|| format!("invalid ext_threads {v:?} (0 to {THREADS_MAX})"))?)
            }
            "ext_item_age" => {
                self.item_age = Some(v.parse().map_err(|_| format!("invalid ext_item_age {v:?} (seconds)"))?)
            }
            _ if NOTED.contains(&k) => {
                tracing::info!("-o {k}={v}: accepted for memcached compatibility, no effect here (docs/protocol.md)");
                self.noted.retain(|(n, _)| n != k);
                self.noted.push((k.to_string(), v.to_string()));
            }
            _ => return Ok(false),
        }
        if k != "ext_path" && !NOTED.contains(&k) {
            self.given.push(format!("{k}={v}"));
        }
        Ok(true)
    }

    pub fn enabled(&self) -> bool {
        !self.paths.is_empty()
    }

    /// The options given that do nothing, by their `stats settings` name,
    /// with their value (bytes for `ext_wbuf_size` and `ext_page_size`,
    /// as memcached shows them): the [`NOTED`] ones, and without
    /// `ext_path` every one.
    pub fn without_effect(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !self.enabled() {
            let mib = |n: Option<u64>| n.map(|n| (n << 20).to_string());
            let tier = [
                ("ext_item_size", self.item_size.map(|n| n.to_string())),
                ("ext_item_age", self.item_age.map(|n| n.to_string())),
                ("ext_recache_rate", self.recache_rate.map(|n| n.to_string())),
                ("ext_wbuf_size", mib(self.wbuf_mib)),
                ("ext_page_size", mib(self.page_mib)),
                ("ext_threads", self.threads.map(|n| n.to_string())),
            ];
            out.extend(tier.into_iter().filter_map(|(k, v)| Some((k, v?))));
        }
        for (k, v) in &self.noted {
            if let Some(name) = NOTED.iter().find(|n| **n == k.as_str()) {
                out.push((*name, v.clone()));
            }
        }
        out
    }

    /// Opens the paths and builds the tier for items up to `item_size_max`
    /// (the options not given take [`FlashTier::new`]'s defaults). A path
    /// another process has open as its flash file is refused
    /// ([`ConfigError::InUse`]); this process holds each path's lock for
    /// as long as the tier lives (the process's life).
    pub fn open(&self, item_size_max: usize) -> Result<Option<FlashTier>, ConfigError> {
        if self.paths.is_empty() {
            for opt in &self.given {
                tracing::info!("-o {opt}: accepted, no effect here: the flash tier is off (no -o ext_path)");
            }
            return Ok(None);
        }
        let total: u64 = self.paths.iter().map(|p| p.1).sum();
        // A region holds at least two of the largest items; without
        // ext_page_size it is memcached's 64 MiB, less for small files so
        // that there are at least 16 regions to rotate.
        let least = ((2 * (item_size_max as u64 + 64)).div_ceil(1 << 20)).max(1);
        let page_mib = match self.page_mib {
            Some(p) if p < least => {
                return Err(format!("ext_page_size {p} is too small for -I (at least {least} MB)").into());
            }
            Some(p) => p,
            None => ((total / 16) >> 20).clamp(least, 64.max(least)),
        };
        // A batch is written once it holds the write buffer, so it may
        // reach the buffer plus one item: at most half a region and -I.
        let wbuf = ((self.wbuf_mib.unwrap_or(4) << 20) as usize).min((page_mib << 19) as usize);
        let mut devices = Vec::new();
        for (path, size) in &self.paths {
            let d = OsBackend.open_device(path, *size).map_err(|e| {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    ConfigError::InUse(format!(
                        "ext_path {}: another process uses it as its flash file ({e})",
                        path.display()
                    ))
                } else {
                    ConfigError::Usage(format!("ext_path {}: {e}", path.display()))
                }
            })?;
            if !d.locked {
                tracing::warn!(
                    path = %path.display(),
                    "ext_path: the file system cannot lock the flash file; nothing stops a second server using it"
                );
            }
            devices.push(d);
        }
        let cfg = strata_flash::Config { region_size: page_mib << 20, max_record: item_size_max + 64 };
        let log = Flash::new(&cfg, devices).map_err(|e| ConfigError::Usage(format!("ext_path: {e}")))?;
        tracing::info!(
            "flash tier: {} region(s) of {page_mib} MiB on {} path(s), {} bytes",
            log.regions(),
            self.paths.len(),
            log.capacity()
        );
        let tier = FlashTier::new(Arc::new(log));
        Ok(Some(FlashTier {
            min_item: self.item_size.unwrap_or(tier.min_item),
            item_age: self.item_age.unwrap_or(tier.item_age),
            noted: self.noted.clone(),
            write_buffer: wbuf,
            paths: self.paths.clone(),
            recache_rate: self.recache_rate.unwrap_or(tier.recache_rate),
            io_threads: self.threads.unwrap_or(tier.io_threads),
            ..tier
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_as_memcached_spells_them() {
        let mut o = ExtOptions::default();
        assert_eq!(o.take("ext_path", "/tmp/x:64G"), Ok(true));
        assert_eq!(o.take("ext_path", "/dev/nvme0n1:1T"), Ok(true));
        assert_eq!(o.take("ext_item_size", "1024"), Ok(true));
        assert_eq!(o.take("ext_wbuf_size", "8"), Ok(true));
        assert_eq!(o.take("ext_threads", "8"), Ok(true), "accepted with a note");
        assert_eq!(o.take("ext_recache_rate", "10"), Ok(true));
        assert!(o.take("ext_recache_rate", "often").is_err());
        assert_eq!(o.take("ext_item_age", "3600"), Ok(true));
        assert!(o.take("ext_item_age", "-1").is_err());
        assert_eq!(o.take("ext_max_frag", "0.5"), Ok(true), "accepted, noted");
        assert_eq!((o.item_age, o.noted.clone()), (Some(3600), vec![("ext_max_frag".into(), "0.5".into())]));
        assert_eq!(o.take("hashpower", "20"), Ok(false), "not ours");
        assert_eq!(o.paths, vec![(PathBuf::from("/tmp/x"), 64 << 30), (PathBuf::from("/dev/nvme0n1"), 1 << 40)]);
        assert_eq!((o.item_size, o.wbuf_mib), (Some(1024), Some(8)));
        assert!(o.take("ext_path", "nosize").is_err());
        assert!(o.take("ext_path", ":5G").is_err());
        assert!(o.take("ext_path", "/x:lots").is_err());
        assert!(o.take("ext_wbuf_size", "0").is_err());
    }

    #[test]
    fn opens_a_sparse_file_in_regions() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = ExtOptions::default();
        let path = dir.path().join("flash");
        o.take("ext_path", &format!("{}:256M", path.display())).unwrap();
        let t = o.open(1 << 20).unwrap().unwrap_or_else(|| panic!("on"));
        assert_eq!((t.log.region_size(), t.log.regions(), t.min_item), (16 << 20, 16, 512));
        assert_eq!(t.write_buffer, 4 << 20);
        let mut small_pages = ExtOptions::default();
        let p2 = dir.path().join("p");
        small_pages.take("ext_path", &format!("{}:64M", p2.display())).unwrap();
        let t = small_pages.open(1 << 20).unwrap().unwrap_or_else(|| panic!("on"));
        assert_eq!((t.log.region_size(), t.write_buffer), (4 << 20, 2 << 20), "half a region");
        assert_eq!(std::fs::metadata(&path).map(|m| m.len()).ok(), Some(256 << 20));
        let mut small = ExtOptions::default();
        small.take("ext_path", &format!("{}:3M", dir.path().join("s").display())).unwrap();
        assert!(small.open(1 << 20).is_err(), "fewer than two regions");
    }
}
