//! memcached's `-o` options for machinery strata does not have (slab
//! classes and their mover, chunked items, the segmented LRU, logger
//! buffers) or that name what strata always does: accepted so that a
//! memcached command line starts unchanged, but checked as memcached 1.6.18
//! checks them (a value memcached refuses is refused, in memcached's
//! words), recorded for `stats settings`, and each logged once at start
//! with what strata does instead. A misspelt option is still an error
//! (cli.rs).

use strata_server::TuningConfig;

/// Why an option does nothing here: what strata does instead.
const NO_SLABS: &str =
    "no slab classes: segments serve items of every size, so no memory is set aside per size to move";
const NO_CHUNKS: &str = "no slab chunks: an item is stored whole in a segment";
const NO_LRUS: &str = "no hot/warm/cold LRUs: eviction is S3-FIFO (docs/design.md)";
const FAST: &str = "strata always answers a connection over -c with an error and closes it";
const INLINE: &str = "memcached 1.6 ignores it too";
const NO_SECCOMP: &str = "strata installs no seccomp filter";

/// Options with no `stats settings` key, and why they do nothing.
const UNKEYED: &[(&str, &str)] = &[
    ("modern", "memcached 1.6 sets no new defaults with it either"),
    ("slab_sizes", NO_SLABS),
    ("no_chunked_items", NO_CHUNKS),
    ("sock_cookie_id", "strata does not mark its sockets"),
    ("no_hashexpand", "the index grows a stripe at a time, under that stripe's lock"),
    ("resp_obj_mem_limit", "memcached 1.6 no longer uses it either (read_buf_mem_limit is the limit)"),
    ("drop_privileges", NO_SECCOMP),
    ("no_drop_privileges", NO_SECCOMP),
];

/// The largest `watcher_logbuf_size` taken, in bytes: 64 times memcached's
/// default, 320 MiB for the 20 watchers there may be.
const WATCHER_BUF_MAX: usize = 16 << 20;

/// memcached's `CHUNK_ALIGN_BYTES`: how much larger each of `slab_sizes`
/// must be than the one before.
const CHUNK_ALIGN: u64 = 8;

/// memcached's `slab_page_size`, which `slab_chunk_max` must divide.
const SLAB_PAGE: u64 = 1 << 20;

/// What the options said, on top of the server's [`TuningConfig`].
#[derive(Debug, Default)]
pub struct Tuning {
    pub cfg: TuningConfig,
    /// `slab_sizes`, checked once `-n` and `slab_chunk_max` are known.
    slab_sizes: Option<String>,
    /// Whether `slab_chunk_max` was given (only then is it checked
    /// against `-I`: memcached refuses an `-I` under its default, strata
    /// takes any from 1 KiB).
    chunk_given: bool,
    /// The lines for the log, written once every option has passed its
    /// checks (a refused command line says only why).
    notes: Vec<String>,
}

/// memcached's `atof`-then-check options: what does not parse is refused
/// with the same message as a value out of range (atof gives 0).
fn float(v: &str, ok: impl Fn(f64) -> bool, msg: &str) -> Result<f64, String> {
    v.parse::<f64>().ok().filter(|f| f.is_finite() && ok(*f)).ok_or_else(|| msg.to_string())
}

fn int<T: std::str::FromStr>(v: &str, ok: impl Fn(&T) -> bool, msg: &str) -> Result<T, String> {
    v.parse::<T>().ok().filter(ok).ok_or_else(|| msg.to_string())
}

impl Tuning {
    /// Takes option `k=v` if it is one of these; false if it is not.
    pub fn take(&mut self, k: &str, v: &str) -> Result<bool, String> {
        if k == "track_sizes" {
            // memcached's item size histogram, kept here too (`stats sizes`).
            self.cfg.track_sizes = true;
            return Ok(true);
        }
        if k == "watcher_logbuf_size" {
            // KiB, as memcached takes it: each watcher's buffer, grown as
            // lines wait, so bounded here (20 watchers at most).
            let kib = int::<usize>(v, |_| true, "could not parse argument to watcher_logbuf_size")?;
            self.cfg.watcher_buf = kib.saturating_mul(1024).min(WATCHER_BUF_MAX);
            if kib.saturating_mul(1024) > WATCHER_BUF_MAX {
                self.notes.push(format!(
                    "-o watcher_logbuf_size={v}: each watcher's buffer is at most {} KiB here",
                    WATCHER_BUF_MAX >> 10
                ));
            }
            return Ok(true);
        }
        let Some((key, why)) = self.record(k, v)? else {
            let Some((_, why)) = UNKEYED.iter().find(|(name, _)| *name == k) else { return Ok(false) };
            self.note(k, v, why);
            return Ok(true);
        };
        if !self.cfg.no_effect.contains(&key) {
            self.cfg.no_effect.push(key);
            self.note(k, v, why);
        }
        Ok(true)
    }

    /// `no_modern`, memcached's bundle of 1.5's defaults: the caller turns
    /// the crawler and the background reclaimer (memcached's LRU
    /// maintainer) off; here the slab and LRU settings it also sets, which
    /// `stats settings` shows and which do nothing here.
    pub fn no_modern(&mut self) {
        let r = &mut self.cfg.recorded;
        r.slab_reassign = false;
        r.lru_segmented = false;
        if !self.chunk_given {
            r.slab_chunk_max = SLAB_PAGE;
        }
        self.cfg.slab_automove = 0;
        self.notes.push(format!(
            "-o no_modern: the LRU crawler and the background reclaimer (memcached's LRU maintainer) off, as in \
             memcached; its slab and LRU settings are shown in stats settings and do nothing here: {NO_SLABS}"
        ));
    }

    fn note(&mut self, k: &str, v: &str, why: &str) {
        let opt = if v.is_empty() { k.to_string() } else { format!("{k}={v}") };
        self.notes.push(format!("-o {opt}: accepted for memcached compatibility, no effect here: {why}"));
    }

    /// Records option `k=v` if it has a `stats settings` key: the key and
    /// why it does nothing.
    fn record(&mut self, k: &str, v: &str) -> Result<Option<(&'static str, &'static str)>, String> {
        let r = &mut self.cfg.recorded;
        Ok(Some(match k {
            "slab_reassign" | "no_slab_reassign" => {
                r.slab_reassign = k == "slab_reassign";
                ("slab_reassign", NO_SLABS)
            }
            "slab_automove" => {
                self.cfg.slab_automove = int(v, |n| *n <= 2, "slab_automove must be between 0 and 2")?;
                ("slab_automove", NO_SLABS)
            }
            "no_slab_automove" => {
                self.cfg.slab_automove = 0;
                ("slab_automove", NO_SLABS)
            }
            "slab_automove_ratio" => {
                r.slab_automove_ratio = float(v, |f| f > 0.0 && f <= 1.0, "slab_automove_ratio must be > 0 and < 1")?;
                ("slab_automove_ratio", NO_SLABS)
            }
            "slab_automove_window" => {
                r.slab_automove_window = f64::from(int::<u32>(v, |w| *w > 2, "slab_automove_window must be > 2")?);
                ("slab_automove_window", NO_SLABS)
            }
            "slab_automove_freeratio" => {
                r.slab_automove_freeratio = float(v, |_| true, "could not parse argument to slab_automove_freeratio")?;
                ("slab_automove_freeratio", NO_SLABS)
            }
            "slab_chunk_max" => {
                r.slab_chunk_max = int(v, |n| *n > 0, "could not parse argument to slab_chunk_max")?;
                self.chunk_given = true;
                ("slab_chunk_max", NO_CHUNKS)
            }
            "tail_repair_time" => {
                r.tail_repair_time = int(v, |t| *t >= 10, "Cannot set tail_repair_time to less than 10 seconds")?;
                ("tail_repair_time", "no LRU tail to repair: items are not reference-locked in a queue")
            }
            "hash_algorithm" => {
                if !matches!(v, "jenkins" | "murmur3" | "xxh3") {
                    return Err("Unknown hash_algorithm option (jenkins, murmur3, xxh3)".into());
                }
                ("hash_algorithm", "strata hashes keys with aHash (stats settings: hash_algorithm ahash)")
            }
            "lru_segmented" => {
                r.lru_segmented = true;
                ("lru_segmented", NO_LRUS)
            }
            "hot_lru_pct" => {
                r.hot_lru_pct = int(v, |p| (1..80).contains(p), "hot_lru_pct must be > 1 and < 80")?;
                ("hot_lru_pct", NO_LRUS)
            }
            "warm_lru_pct" => {
                r.warm_lru_pct = int(v, |p| (1..80).contains(p), "warm_lru_pct must be > 1 and < 80")?;
                ("warm_lru_pct", NO_LRUS)
            }
            "hot_max_factor" => {
                r.hot_max_factor = float(v, |f| f > 0.0, "hot_max_factor must be > 0")?;
                ("hot_max_factor", NO_LRUS)
            }
            "warm_max_factor" => {
                r.warm_max_factor = float(v, |f| f > 0.0, "warm_max_factor must be > 0")?;
                ("warm_max_factor", NO_LRUS)
            }
            "temporary_ttl" => {
                // As memcached: it also turns the temporary LRU on.
                r.temporary_ttl = int(v, |_| true, "could not parse argument to temporary_ttl")?;
                r.temp_lru = true;
                ("temporary_ttl", NO_LRUS)
            }
            "worker_logbuf_size" => {
                let kib = int::<u64>(v, |_| true, "could not parse argument to worker_logbuf_size")?;
                r.worker_logbuf_size = kib.saturating_mul(1024);
                ("worker_logbuf_size", "workers write watch lines straight into each watcher's buffer")
            }
            "inline_ascii_resp" | "no_inline_ascii_resp" => ("inline_ascii_response", INLINE),
            "maxconns_fast" | "no_maxconns_fast" => ("maxconns_fast", FAST),
            "slab_sizes" => {
                self.slab_sizes = Some(v.to_string());
                return Ok(None);
            }
            _ => return Ok(None),
        }))
    }

    /// The checks memcached makes once every option is read, against `-I`
    /// (`item_size_max`) and `-n` (`chunk_size`).
    pub fn finish(mut self, item_size_max: usize, chunk_size: usize) -> Result<TuningConfig, String> {
        let r = &mut self.cfg.recorded;
        if r.hot_lru_pct + r.warm_lru_pct > 80 {
            return Err("hot_lru_pct + warm_lru_pct cannot be more than 80% combined".into());
        }
        let (max, chunk) = (item_size_max as u64, r.slab_chunk_max);
        if !self.chunk_given {
            // memcached's default, but never over the largest item.
            r.slab_chunk_max = chunk.min(max);
            return self.sizes_and_notes(chunk_size);
        }
        if chunk > max {
            return Err(format!("slab_chunk_max (bytes: {chunk}) cannot be larger than -I (item_size_max {max})"));
        }
        if !max.is_multiple_of(chunk) {
            return Err(format!(
                "-I (item_size_max: {max}) must be evenly divisible by slab_chunk_max (bytes: {chunk})"
            ));
        }
        if !SLAB_PAGE.is_multiple_of(chunk) {
            return Err(format!(
                "slab_chunk_max (bytes: {chunk}) must divide evenly into {SLAB_PAGE} (slab_page_size)"
            ));
        }
        self.sizes_and_notes(chunk_size)
    }

    /// `slab_sizes`' checks, then the log lines.
    fn sizes_and_notes(self, chunk_size: usize) -> Result<TuningConfig, String> {
        if let Some(sizes) = &self.slab_sizes {
            slab_sizes(sizes, chunk_size as u64, self.cfg.recorded.slab_chunk_max)?;
        }
        for line in &self.notes {
            tracing::info!("{line}");
        }
        Ok(self.cfg)
    }
}

/// memcached's `slab_sizes=N-N-...` checks: each size between `-n` and
/// `slab_chunk_max`, each more than 8 bytes over the one before.
fn slab_sizes(list: &str, min: u64, max: u64) -> Result<(), String> {
    let mut last = 0u64;
    for p in list.split('-').filter(|p| !p.is_empty()) {
        let size = p.parse::<u64>().unwrap_or(0);
        if size < min || size > max {
            return Err(format!("slab size {size} is out of valid range"));
        }
        if last >= size {
            return Err(format!("slab size {size} cannot be lower than or equal to a previous class size"));
        }
        if size <= last + CHUNK_ALIGN {
            return Err(format!("slab size {size} must be at least {CHUNK_ALIGN} bytes larger than previous class"));
        }
        last = size;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuned(opts: &[(&str, &str)]) -> Result<TuningConfig, String> {
        let mut t = Tuning::default();
        for (k, v) in opts {
            assert!(t.take(k, v)?, "{k} is taken");
        }
        t.finish(1 << 20, 48)
    }

    #[test]
    fn values_memcached_refuses_are_refused_in_its_words() {
        let refused = |k: &str, v: &str| tuned(&[(k, v)]).err().unwrap_or_default();
        assert_eq!(refused("hash_algorithm", "crc32"), "Unknown hash_algorithm option (jenkins, murmur3, xxh3)");
        assert_eq!(refused("slab_automove", "3"), "slab_automove must be between 0 and 2");
        assert_eq!(refused("hot_lru_pct", "80"), "hot_lru_pct must be > 1 and < 80");
        assert_eq!(refused("hot_lru_pct", "79"), "hot_lru_pct + warm_lru_pct cannot be more than 80% combined");
        assert_eq!(refused("tail_repair_time", "0"), "Cannot set tail_repair_time to less than 10 seconds");
        assert_eq!(refused("slab_automove_window", "2"), "slab_automove_window must be > 2");
        assert_eq!(refused("hot_max_factor", "0"), "hot_max_factor must be > 0");
        assert_eq!(
            refused("slab_chunk_max", "3000"),
            "-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 3000)"
        );
        assert_eq!(
            refused("slab_sizes", "100-104"),
            "slab size 104 must be at least 8 bytes larger than previous class"
        );
        assert_eq!(refused("slab_sizes", "40-200"), "slab size 40 is out of valid range");
        assert_eq!(refused("worker_logbuf_size", "x"), "could not parse argument to worker_logbuf_size");
    }

    #[test]
    fn accepted_values_are_recorded_and_named_once() {
        let t = tuned(&[
            ("slab_reassign", ""),
            ("slab_automove", "2"),
            ("hash_algorithm", "murmur3"),
            ("tail_repair_time", "20"),
            ("worker_logbuf_size", "64"),
            ("slab_chunk_max", "16384"),
            ("slab_sizes", "100-200-300"),
            ("slab_reassign", ""),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let r = &t.recorded;
        assert!(r.slab_reassign);
        assert_eq!(
            (t.slab_automove, r.tail_repair_time, r.worker_logbuf_size, r.slab_chunk_max),
            (2, 20, 65536, 16384)
        );
        assert_eq!(
            t.no_effect,
            [
                "slab_reassign",
                "slab_automove",
                "hash_algorithm",
                "tail_repair_time",
                "worker_logbuf_size",
                "slab_chunk_max"
            ]
        );
        assert!(!Tuning::default().take("slab_reasign", "").unwrap_or(true), "not ours: cli.rs refuses it");
        // Not given, it is never over -I (which strata takes from 1 KiB).
        let small = Tuning::default().finish(1024, 48).map(|t| t.recorded.slab_chunk_max);
        assert_eq!(small, Ok(1024));
        // A watcher's buffer: KiB as memcached, bounded.
        assert_eq!(tuned(&[("watcher_logbuf_size", "8")]).map(|t| t.watcher_buf), Ok(8 << 10));
        assert_eq!(tuned(&[("watcher_logbuf_size", "99999999")]).map(|t| t.watcher_buf), Ok(WATCHER_BUF_MAX));
    }
}
