//! The flash tier's part of a snapshot: the log's state and the records
//! linked at the cut, and restoring them at start.

use super::*;

/// The flash tier's part of a snapshot: the log's state and, for every
/// flash slot, its record's address (in granules), sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlashImage {
    pub checkpoint: strata_flash::Checkpoint,
    pub entries: Vec<u64>,
}

/// What a restore of the flash tier brought back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlashRestored {
    pub items: u64,
    /// Entries not brought back: their region was reclaimed since, their
    /// record is unreadable or damaged, expired, flushed, or the key is in
    /// memory already.
    pub dropped: u64,
    /// The image is for another flash layout (size, regions): nothing
    /// was brought back.
    pub mismatch: bool,
}

const ENTRY_ADDR: u64 = (1 << strata_flash::ADDR_BITS) - 1;

impl Store {
    /// The flash tier's state for a snapshot, with it on. Outside a cut the
    /// log's writer is held meanwhile: nothing moves to flash or is
    /// reclaimed while the slots are collected (a pass over the index,
    /// under each stripe's lock in turn).
    ///
    /// While a snapshot's cut holds, the image is as of the cut: the log as
    /// it stood then, and the records linked then (those still linked, and
    /// those unlinked since, which the cut noted); regions holding them are
    /// not reclaimed meanwhile (`reserve_flash`).
    ///
    /// Within a cut the log's writer is not held while the index is walked
    /// (a pass over every stripe, which takes long on a large index):
    /// records written meanwhile are after the cut and left out, and the
    /// regions of those before it are not reclaimed. Holding the writer
    /// there held up every worker that evicted to flash for the whole walk
    /// (issue 41: a probe waited 1.66 s during a soak's snapshot).
    pub fn flash_image(&self) -> Option<FlashImage> {
        let log = self.flash_log()?;
        let cut = self.cut().flash.lock().clone().filter(|_| self.cut_active());
        let w = if cut.is_none() { Some(log.writer()) } else { None };
        let mut entries = Vec::new();
        for i in 0..self.index().stripes() {
            self.index().lock(i).for_each_item(|s| {
                if slot::is_flash(s) && cut.as_ref().is_none_or(|cp| flash_before(log, cp, flash::addr(s))) {
                    entries.push(flash::addr(s));
                }
            });
        }
        let checkpoint = match (cut, &w) {
            (Some(cp), _) => {
                entries.extend(self.cut().flash_died.lock().iter().copied());
                cp
            }
            (None, Some(w)) => w.checkpoint(),
            (None, None) => log.checkpoint(),
        };
        drop(w);
        entries.sort_unstable();
        entries.dedup();
        Some(FlashImage { checkpoint, entries })
    }

    /// The flash log's writer, with the flash tier on.
    pub(crate) fn flash_writer(&self) -> Option<Writer<'_>> {
        self.flash_log().map(|l| l.writer())
    }

    /// Notes that the flash record at slot address `addr`, linked until
    /// now, is being unlinked (under its bucket lock), if cut `g` (0: none)
    /// is running and the record is from before it.
    pub(crate) fn note_flash_death(&self, g: u64, addr: u64) {
        if g == 0 || self.cut_gen() != g {
            return;
        }
        let Some(log) = self.flash_log() else { return };
        let before = self.cut().flash.lock().as_ref().is_some_and(|cp| flash_before(log, cp, addr));
        let mut died = self.cut().flash_died.lock();
        // Again under the lock, which the cut's end and the next cut's
        // beginning take to clear the list: a note of the last cut's would
        // stay in the next.
        if before && self.cut_gen() == g {
            died.push(addr);
        }
    }

    /// Whether region `r` holds records a running snapshot's cut saves.
    pub(super) fn flash_region_in_cut(&self, r: u32) -> bool {
        let Some(log) = self.flash_log().filter(|_| self.cut_active()) else { return false };
        let cut = self.cut().flash.lock();
        cut.as_ref()
            .and_then(|cp| cp.regions.get(r as usize))
            .is_some_and(|&(end, gen)| end > 0 && log.generation(r) == gen)
    }

    /// Makes every record written to flash so far durable (an fdatasync of
    /// each flash file); nothing to do without the flash tier. A snapshot
    /// calls it after [`Store::flash_image`] and before it is made durable
    /// itself, so that every record it references survives a power loss.
    pub fn sync_flash(&self) -> std::io::Result<()> {
        self.flash_log().map_or(Ok(()), |log| log.sync())
    }

    /// Brings a snapshot's flash items back, after its memory segments
    /// (a key in memory is newer than its flash record): the regions whose
    /// header still names the saved generation are read in order and each
    /// saved address found there is linked again.
    pub fn restore_flash(&self, img: &FlashImage) -> FlashRestored {
        let mut r = FlashRestored::default();
        let Some(log) = self.flash_log() else {
            r.dropped = img.entries.len() as u64;
            r.mismatch = true;
            return r;
        };
        let Some(kept) = log.restore(&img.checkpoint) else {
            r.dropped = img.entries.len() as u64;
            r.mismatch = true;
            return r;
        };
        let c = Counters::default();
        let now = self.clock().now();
        let flush_epoch = self.epochs().flushed();
        let region_of = |e: &u64| log.region_of(log.from_slot(e & ENTRY_ADDR));
        let mut buf = Vec::new();
        let mut at = 0;
        while at < img.entries.len() {
            let region = region_of(&img.entries[at]);
            let n = img.entries[at..].iter().take_while(|e| region_of(e) == region).count();
            let wanted = &img.entries[at..at + n];
            at += n;
            if !kept.get(region as usize).copied().unwrap_or(false) {
                r.dropped += n as u64;
                continue;
            }
            let mut next = 0;
            let scanned = log.scan_region(region, &mut buf, |addr, rec| {
                let a = log.to_slot(addr);
                while next < wanted.len() && wanted[next] & ENTRY_ADDR < a {
                    next += 1;
                    r.dropped += 1;
                }
                if next == wanted.len() || wanted[next] & ENTRY_ADDR != a {
                    return;
                }
                next += 1;
                let Some(it) = parse_item(rec.item) else {
                    r.dropped += 1;
                    return;
                };
                // The record at a saved address of a region still in its
                // saved generation is the one the slot pointed at (the
                // hash, and so the slot's tags, differ in this process).
                let loc = self.index().locate(it.key());
                if rec.epoch <= flush_epoch || Clock::is_expired(it.expiry(), now) {
                    r.dropped += 1;
                    return;
                }
                let mut st = self.index().lock(loc.stripe);
                // A key in memory is the newer copy. (Two keys whose tags
                // match in this process both come back, as they can be
                // on flash together while serving.)
                if self.find(&st, loc, it.key()).is_some() {
                    r.dropped += 1;
                    return;
                }
                let s = flash::pack(loc.tag, loc.ext, loc.more(st.table_bits()), a);
                let before = st.footprint();
                st.insert(loc.bucket, s);
                self.account(&mut st, s);
                if st.wants_growth() {
                    self.grow(loc.stripe, &mut st, &c);
                }
                self.index().note_footprint(before, st.footprint());
                r.items += 1;
            });
            // Entries past the last record read (or all, if the region
            // could not be read) are not coming back.
            r.dropped += (wanted.len() - next) as u64;
            if let Err(e) = scanned {
                warn_rate_limited("could not read a region at restore", &e);
            }
        }
        r
    }
}

/// Whether the record at slot address `addr` was written before the
/// checkpoint `cp` was taken: its region is in the same generation, and it
/// lies below where the region was written to then.
fn flash_before(log: &Flash, cp: &strata_flash::Checkpoint, addr: u64) -> bool {
    let at = log.from_slot(addr & ENTRY_ADDR);
    let r = log.region_of(at);
    cp.regions.get(r as usize).is_some_and(|&(end, gen)| log.generation(r) == gen && at % log.region_size() < end)
}
