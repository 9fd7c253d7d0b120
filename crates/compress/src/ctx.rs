//! One worker's compression state ([`Ctx`]): its zstd contexts, the
//! dictionary each references, compressing a value (or deciding not to)
//! and decompressing a stored one.

use super::*;
use std::sync::Weak;

/// One worker's compression state: zstd contexts (not shareable) and the
/// dictionaries they currently reference.
pub struct Ctx {
    codec: Arc<Codec>,
    cctx: CCtx<'static>,
    dctx: DCtx<'static>,
    /// What `cctx` references: (id, dictionary). The context holds a raw
    /// pointer into the dictionary's tables, so the `Arc` is kept here for
    /// as long as the reference stands (zstd: "dictionary must outlive the
    /// context").
    c_dict: Option<(u8, Arc<Dict>)>,
    d_dict: Option<(u8, Arc<Dict>)>,
    /// A compression context at the cold level with the current
    /// dictionary loaded ([`Ctx::compress_cold`]), built when first needed,
    /// for the dictionary it was built from (compared by pointer: ids come
    /// back), and its bytes as last counted in the codec's memory.
    cold: Option<(Arc<Dict>, CCtx<'static>, usize)>,
    /// The dictionary whose cold context was refused ([`Ctx::refuse_cold`]:
    /// too large, or not paying): not built again for it. Weak, so that
    /// it does not keep a retired dictionary's bytes alive (and its
    /// allocation, so that no other dictionary can come at its address).
    cold_refused: Weak<Dict>,
    /// The codec's epoch when these were looked up.
    epoch: u64,
    /// A stored form's frame with its FHD put back, for zstd to decode
    /// (the stored form's bytes are read-only where they lie).
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("c_dict", &self.c_dict.as_ref().map(|d| d.0)).finish()
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // Drop the contexts' references before the dictionaries they point
        // into can go (fields drop in order, but make it explicit).
        let _ = self.cctx.disable_dictionary();
        let _ = self.dctx.disable_dictionary();
        self.release_cold();
    }
}

impl Ctx {
    pub fn new(codec: Arc<Codec>) -> Result<Ctx, CompressError> {
        let cctx = new_cctx(codec.cfg.level)?;
        Ok(Ctx {
            codec,
            cctx,
            dctx: new_dctx()?,
            c_dict: None,
            d_dict: None,
            cold: None,
            cold_refused: Weak::new(),
            epoch: 0,
            scratch: Vec::new(),
        })
    }

    pub fn codec(&self) -> &Arc<Codec> {
        &self.codec
    }

    /// The stored form of `value` into `out` (cleared first), if storing it
    /// compressed pays; false (and `out` unspecified) if `value` is to be
    /// stored as it is. A stored form comes with a reference to its
    /// dictionary ([`dict_id`]): give it back with [`Codec::release`] once
    /// whatever keeps it alive has taken its own.
    pub fn compress(&mut self, value: &[u8], out: &mut Vec<u8>) -> bool {
        self.compress_as(value, out, true, false)
    }

    /// [`Ctx::compress`] for a value stored before the current dictionary
    /// (the store's recompression pass): the same stored form and
    /// reference, but the value is neither sampled for a training nor
    /// counted in the drift a retraining is judged on, which are about
    /// what clients write now.
    pub fn compress_again(&mut self, value: &[u8], out: &mut Vec<u8>) -> bool {
        self.compress_as(value, out, false, false)
    }

    /// [`Ctx::compress_again`] at [`Config::cold_level`], with the current
    /// dictionary prepared at that level; false without a dictionary or
    /// without a cold level. The context keeps that prepared dictionary
    /// (counted in [`Codec::memory`]) until the current one changes or
    /// [`Ctx::release_cold`].
    pub fn compress_cold(&mut self, value: &[u8], out: &mut Vec<u8>) -> bool {
        self.codec.cold_on() && self.compress_as(value, out, false, true)
    }

    fn compress_as(&mut self, value: &[u8], out: &mut Vec<u8>, fresh: bool, cold: bool) -> bool {
        let (min_size, min_saving) = (self.codec.cfg.min_size, usize::from(self.codec.cfg.min_saving_percent));
        if value.len() < min_size {
            return false;
        }
        if looks_random(value) {
            add(&self.codec.counters.skipped, 1);
            return false;
        }
        if fresh {
            self.codec.sample(value);
        }
        let started = Instant::now();
        let got = if cold { self.cold_dict() } else { self.current_dict() };
        let Ok((id, trained)) = got else { return false };
        if cold && id == NO_DICT {
            return false;
        }
        let budget = value.len() - value.len() * min_saving / 100;
        // The frame goes straight into `out`; its first byte, the FHD, is
        // then overwritten by the id byte whose header bits imply it (or,
        // for any other FHD, the id byte goes in front).
        out.clear();
        out.reserve(zstd_safe::compress_bound(value.len()) + 1);
        let res = match self.cold.as_mut().filter(|_| cold) {
            Some((_, cctx, counted)) => {
                let res = cctx.compress2(out, value);
                // zstd builds the loaded dictionary's tables on first use.
                let now = cctx.sizeof();
                if now != *counted {
                    self.codec.cold_memory.fetch_add(now, Relaxed);
                    self.codec.cold_memory.fetch_sub(std::mem::replace(counted, now), Relaxed);
                }
                res
            }
            None => self.cctx.compress2(out, value),
        };
        if cold && self.cold.as_ref().is_some_and(|c| c.2 > self.codec.cfg.cold_memory_max) {
            self.refuse_cold();
            return false;
        }
        add(&self.codec.counters.compress_ns, started.elapsed().as_nanos() as u64);
        let Ok(len) = res else { return false };
        let code = header_code(&out[..len]);
        let stored_len = if code == FULL_FHD { 1 + len } else { len };
        let worth = stored_len <= budget;
        if id != NO_DICT && fresh {
            // Drift counts every value the dictionary was tried on, stored
            // compressed or not: values it stopped helping are the signal.
            let c = &self.codec.counters;
            add(&c.window_in, value.len() as u64);
            add(&c.window_out, if worth { stored_len } else { value.len() } as u64);
            self.codec.check_drift(id, trained);
        }
        if !worth {
            add(&self.codec.counters.not_worth, 1);
            return false;
        }
        match out.first_mut() {
            Some(first) if code != FULL_FHD => *first = code << 6 | id,
            _ => out.insert(0, code << 6 | id),
        }
        // The new value references its dictionary from here. A dictionary
        // may stop being current and be freed while this ran: whoever frees
        // one moves the epoch and then reads the count, and this takes the
        // count and then reads the epoch (all SeqCst), so either the freer
        // sees this reference and keeps it, or this sees the epoch moved
        // and stores the value plain.
        let dict = if cold { self.cold.as_ref().map(|c| &c.0) } else { self.c_dict.as_ref().map(|c| &c.1) };
        if let Some(d) = dict.filter(|_| id != NO_DICT) {
            d.refs.fetch_add(1, SeqCst);
            if self.codec.epoch.load(SeqCst) != self.epoch {
                self.codec.release(id);
                return false;
            }
        }
        let c = &self.codec.counters;
        add(&c.compressed, 1);
        add(&c.bytes_in, value.len() as u64);
        add(&c.bytes_out, out.len() as u64);
        true
    }

    /// Forgets the cached dictionaries if any was installed or dropped
    /// since they were looked up.
    fn revalidate(&mut self) -> Result<(), CompressError> {
        let epoch = self.codec.epoch.load(Relaxed);
        if epoch != self.epoch {
            self.cctx.disable_dictionary().map_err(zstd_err)?;
            self.dctx.disable_dictionary().map_err(zstd_err)?;
            self.c_dict = None;
            self.d_dict = None;
            // Keeps no dictionary alive that the codec may have dropped.
            self.release_cold();
            self.epoch = epoch;
        }
        Ok(())
    }

    /// Points the compression context at the current dictionary; its id
    /// and trained ratio.
    fn current_dict(&mut self) -> Result<(u8, f64), CompressError> {
        self.revalidate()?;
        let id = self.codec.current.read().0;
        if let Some((have, d)) = &self.c_dict {
            if *have == id {
                return Ok((id, d.ratio));
            }
        }
        if id == NO_DICT {
            self.cctx.disable_dictionary().map_err(zstd_err)?;
            self.c_dict = None;
            return Ok((NO_DICT, 1.0));
        }
        let d = self.codec.dicts.read()[id as usize].clone().ok_or(CompressError::UnknownDict(id))?;
        self.cctx.ref_cdict(&d.cdict).map_err(zstd_err)?;
        let ratio = d.ratio;
        self.c_dict = Some((id, d));
        Ok((id, ratio))
    }

    /// Makes the cold context ready for the current dictionary; its id and
    /// trained ratio. The dictionary is loaded into a context of its own
    /// with tables sized to it ([`cold_cctx`]): prepared at zstd's own
    /// sizes for the level (`CDict::create`) it took 5.5 MB at level 9
    /// and 8.7 MB at 19 for a 256 KiB dictionary, counted in `-m`.
    fn cold_dict(&mut self) -> Result<(u8, f64), CompressError> {
        self.revalidate()?;
        let id = self.codec.current.read().0;
        if id == NO_DICT {
            return Ok((NO_DICT, 1.0));
        }
        let d = self.codec.dicts.read()[id as usize].clone().ok_or(CompressError::UnknownDict(id))?;
        if self.refused(&d) {
            return Ok((NO_DICT, 1.0));
        }
        if !self.cold.as_ref().is_some_and(|(of, _, _)| Arc::ptr_eq(of, &d)) {
            self.release_cold();
            let cctx = cold_cctx(self.codec.cfg.cold_level, &d.raw)?;
            let bytes = cctx.sizeof();
            self.codec.cold_memory.fetch_add(bytes, Relaxed);
            self.cold = Some((d.clone(), cctx, bytes));
        }
        Ok((id, d.ratio))
    }

    /// Whether the cold level may store anything now: a cold level, a
    /// dictionary, and its context not refused ([`Ctx::refuse_cold`]).
    /// Builds nothing.
    pub fn cold_possible(&self) -> bool {
        let id = self.codec.current.read().0;
        self.codec.cold_on()
            && id != NO_DICT
            && self.codec.dicts.read()[id as usize].as_ref().is_some_and(|d| !self.refused(d))
    }

    /// Whether the cold context was refused for `d` ([`Ctx::refuse_cold`]).
    fn refused(&self, d: &Arc<Dict>) -> bool {
        std::ptr::eq(self.cold_refused.as_ptr(), Arc::as_ptr(d))
    }

    /// Lets the cold context go for good for its dictionary: it took more
    /// than [`Config::cold_memory_max`] (zstd sizes its tables on first
    /// use, so that is known only then), or its user found it does not
    /// pay. Counted in [`CompressStats::cold_refused`].
    pub fn refuse_cold(&mut self) {
        if let Some((d, _, _)) = self.cold.as_ref() {
            self.cold_refused = Arc::downgrade(d);
            add(&self.codec.counters.cold_refused, 1);
        }
        self.release_cold();
    }

    /// Lets the cold context go, and its memory with it
    /// ([`Ctx::compress_cold`] builds it again when next called: ~18 ms
    /// at level 19 for a 256 KiB dictionary, 1 ms at 9).
    pub fn release_cold(&mut self) {
        if let Some((_, _, bytes)) = self.cold.take() {
            self.codec.cold_memory.fetch_sub(bytes, Relaxed);
        }
    }

    /// The original bytes of a stored compressed value, into `out`
    /// (replacing what it held).
    pub fn decompress(&mut self, stored: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        let started = Instant::now();
        let (id, fhd, at, n) = read_header(stored)?;
        // A zstd block is at least 3 bytes and decodes to at most 128 KiB:
        // a larger claim is a damaged form, refused before `out` grows.
        if n > (stored.len() / 3 + 1).saturating_mul(128 << 10) {
            return Err(CompressError::Malformed);
        }
        self.revalidate()?;
        if self.d_dict.as_ref().map_or(NO_DICT, |d| d.0) != id {
            if id == NO_DICT {
                self.dctx.disable_dictionary().map_err(zstd_err)?;
                self.d_dict = None;
            } else {
                let d = self.codec.dicts.read()[id as usize].clone().ok_or(CompressError::UnknownDict(id))?;
                self.dctx.ref_ddict(&d.ddict).map_err(zstd_err)?;
                self.d_dict = Some((id, d));
            }
        }
        let frame = if at == 2 {
            &stored[1..]
        } else {
            // zstd wants the frame whole: put its FHD back in front.
            self.scratch.clear();
            self.scratch.push(fhd);
            self.scratch.extend_from_slice(&stored[at..]);
            &self.scratch[..]
        };
        out.clear();
        // Exactly the stored length: a frame that would decode to more is
        // corrupt, and zstd stops with an error instead of growing `out`.
        out.reserve_exact(n);
        let got = self.dctx.decompress(out, frame).map_err(zstd_err);
        add(&self.codec.counters.decompress_ns, started.elapsed().as_nanos() as u64);
        if got? != n {
            out.clear();
            return Err(CompressError::Zstd("decompressed length differs from the stored one"));
        }
        add(&self.codec.counters.decompressed, 1);
        Ok(())
    }
}

/// A compression context at `level` with dictionary `raw` loaded, its
/// tables sized to the dictionary rather than to the level: a window that
/// holds the dictionary and a value of up to 64 KiB, and hash and chain
/// tables of one entry per COLD_TABLE_SHARE bytes of it.
fn cold_cctx(level: i32, raw: &[u8]) -> Result<CCtx<'static>, CompressError> {
    cold_cctx_with(level, raw, COLD_TABLE_SHARE)
}

/// [`cold_cctx`] with tables of one entry per `share` dictionary bytes
/// (the measurement: `cold_context_sweep` in the tests).
pub(crate) fn cold_cctx_with(level: i32, raw: &[u8], share: usize) -> Result<CCtx<'static>, CompressError> {
    let mut c = new_cctx(level)?;
    let window = (raw.len() + (64 << 10)).next_power_of_two().trailing_zeros().clamp(10, 27);
    let table = (raw.len() / share).max(1 << 10).next_power_of_two().trailing_zeros();
    for p in [CParameter::WindowLog(window), CParameter::HashLog(table), CParameter::ChainLog(table)] {
        c.set_parameter(p).map_err(zstd_err)?;
    }
    c.load_dictionary(raw).map_err(zstd_err)?;
    Ok(c)
}

/// Dictionary bytes per entry of the cold context's hash and chain tables.
const COLD_TABLE_SHARE: usize = 1;
