//! What eviction's copy-forward spends its credit on: the items with the
//! most reads per byte (issue 42).
//!
//! Eviction copies a read item forward only while its worker has credit (a
//! fifth of the bytes it writes, `evict/`). Spent in the order items lie
//! in the victim, the credit kept whatever came first: one 64 KB value read
//! once took the room of 400 values of 160 bytes read as often. The request
//! hit ratio is hits per request, so the room is worth most given to the
//! items with the most accesses per byte (GDSF's priority, Cherkasova 1998,
//! without its aging term: the queue order already ages).
//!
//! [`Density`] is one worker's record of the candidates its evictions met:
//! the bytes of read items by density class (accesses per byte, in half
//! powers of two), decayed so that it follows the workload. Before each
//! victim the worker sets a threshold: the class at which the candidates,
//! densest first, add up to more than a budget (a share of the victims'
//! bytes that `climb.rs` tunes to the hit ratio, none at all to a
//! sixteenth), of which it keeps the share that fits; the densest class
//! present is kept whole. An item below the threshold is evicted though
//! read; one at or above it is copied if the credit allows, as before.
//! With candidates that all fit, the threshold is the lowest class and
//! nothing changes.

/// Density classes: `2·log2(freq · 2^24 / len)`, from 1 byte to segments
/// of 16 MiB and frequencies up to 15.
const CLASSES: usize = 64;

/// The record is halved once it has seen this many victims' bytes, in
/// segments: it follows the last few dozen victims.
const DECAY_SEGMENTS: u64 = 16;

/// A whole class's share.
const ONE: u32 = 1 << 16;

/// An item not read in its stay is a candidate too, with one access, if
/// it is at most this fraction of the mean size of its victim's live
/// items: GDSF keeps a small item accessed once over a large one accessed
/// twice, and a cache-aside set is an access (the miss before it). Where
/// sizes are equal no item is that much smaller, so nothing changes
/// (workloads 5, 6, 13: within 0.1). Workload 10 (100 B to 64 KB): 81.6%
/// and 69.4-69.9% hits before, 82.3-82.7% and 70.8-71.4% after (two
/// rounds each); 16 (200 B to 2 KB, three sets to a get) 71.5% to
/// 71.9-72.1%; 14 and 15 (to 1 MB, by hand) 75.7% to 76.7% and 68.4% to
/// 68.7%. At a half, 10 and 16 gained more
/// (82.9%, 73.4%) but 16's byte hit ratio fell under LRU's (69.0% against
/// 70.9%); every unread item (no size bound) cost the scan of workload 13
/// 3.4 points and workload 6 at ten times the keys 3.6.
const SMALL_UNREAD_DIV: usize = 4;

/// One worker's candidates by density class, and the threshold it set.
#[derive(Debug, Clone)]
pub(crate) struct Density {
    /// Bytes of read items met in victims, by class.
    candidates: [u64; CLASSES],
    /// Bytes of the victims they were met in.
    victims: u64,
    /// The lowest class kept.
    threshold: usize,
    /// The share of the threshold's class that fits the credit, in
    /// 1/65,536ths, and its running sum: the class is kept item by item in
    /// that proportion (the denser classes above it come first).
    share: u32,
    sum: u32,
    /// The mean size of the live items of the victim being evicted.
    mean: usize,
}

impl Default for Density {
    fn default() -> Self {
        Density { candidates: [0; CLASSES], victims: 0, threshold: 0, share: ONE, sum: 0, mean: 0 }
    }
}

/// The class of an item of `len` bytes accessed `freq` times.
pub(crate) fn class(freq: u8, len: usize) -> usize {
    let x = (u64::from(freq) << 24) / (len.max(1) as u64);
    if x == 0 {
        return 0;
    }
    let log = 63 - x.leading_zeros() as usize;
    // The bit below the leading one splits each power of two in two.
    let half = if log > 0 { (x >> (log - 1)) as usize & 1 } else { 0 };
    (2 * log + half).min(CLASSES - 1)
}

impl Density {
    /// A victim of `bytes` is about to be evicted: sets the threshold from
    /// what the record holds (the victim's own candidates come after), for
    /// a budget of the victims' bytes over `divisor` (`climb.rs`).
    pub(crate) fn victim(&mut self, bytes: usize, segment_size: usize, divisor: u64) {
        self.mean = 0;
        let budget = self.victims.checked_div(divisor).unwrap_or(u64::MAX);
        let mut sum = 0;
        self.threshold = 0;
        self.share = ONE;
        for c in (0..CLASSES).rev() {
            let here = self.candidates[c];
            if sum + here > budget {
                // The class that crosses the budget is kept in the share
                // that fits (admitting it whole let its items, wherever
                // they came first in a victim, spend the credit the denser
                // ones after them needed); the ones under it are not.
                // The densest class present is kept whole: with nothing
                // denser to save the credit for, the credit alone decides
                // (a burst of read items the writes before it paid for).
                self.threshold = c;
                if sum > 0 {
                    self.share = ((budget - sum) * u64::from(ONE) / here.max(1)) as u32;
                }
                break;
            }
            sum += here;
        }
        self.victims += bytes as u64;
        if self.victims > DECAY_SEGMENTS * segment_size as u64 {
            self.victims /= 2;
            self.candidates.iter_mut().for_each(|b| *b /= 2);
        }
    }

    /// The victim about to be evicted holds live items of `mean` bytes on
    /// average (after [`Density::victim`]).
    pub(crate) fn victim_mean(&mut self, mean: usize) {
        self.mean = mean;
    }

    /// The accesses an item met in the victim counts for: `freq`, or one
    /// for an item not read in its stay if it is small against the
    /// victim's others ([`SMALL_UNREAD_DIV`]).
    pub(crate) fn accesses(&self, freq: u8, aligned: usize) -> u8 {
        if freq == 0 && aligned.saturating_mul(SMALL_UNREAD_DIV) <= self.mean {
            1
        } else {
            freq
        }
    }

    /// Notes a read item of `len` bytes met in a victim; whether it is dense
    /// enough to be copied forward.
    pub(crate) fn admits(&mut self, freq: u8, len: usize) -> bool {
        let c = class(freq, len);
        self.candidates[c] += len as u64;
        if c != self.threshold || self.share >= ONE {
            return c >= self.threshold;
        }
        self.sum += self.share;
        if self.sum < ONE {
            return false;
        }
        self.sum -= ONE;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copies::COPY_CREDIT_DIV;

    #[test]
    fn classes_order_by_accesses_per_byte() {
        assert!(class(2, 100) > class(2, 64 << 10));
        assert!(class(4, 1000) > class(2, 1000));
        assert_eq!(class(2, 1000), class(4, 2000));
        assert_eq!(class(1, 16 << 20), 0);
        assert_eq!(class(2, 16 << 20), 2);
        assert!(class(15, 1) < CLASSES);
        assert_eq!(class(1, usize::MAX), 0);
    }

    #[test]
    fn everything_is_kept_while_the_candidates_fit_the_credit() {
        let mut d = Density::default();
        for _ in 0..10 {
            d.victim(1 << 20, 1 << 20, COPY_CREDIT_DIV as u64);
            // A tenth of each victim read: under the fifth the credit pays.
            for _ in 0..10 {
                assert!(d.admits(2, 10 << 10));
            }
        }
    }

    #[test]
    fn the_densest_candidates_fill_the_credit_when_there_are_too_many() {
        let mut d = Density::default();
        let (mut small_kept, mut large_kept) = (0, 0);
        for round in 0..40 {
            d.victim(1 << 20, 1 << 20, COPY_CREDIT_DIV as u64);
            // Half of each victim is read: 32 large items and 1,024 small
            // ones of 256 bytes (a quarter of the victim each).
            for _ in 0..32 {
                let kept = d.admits(2, 8 << 10);
                if round >= 20 {
                    large_kept += usize::from(kept);
                }
            }
            for _ in 0..1024 {
                let kept = d.admits(2, 256);
                if round >= 20 {
                    small_kept += usize::from(kept);
                }
            }
        }
        // The small items are a quarter of the victims, the credit a fifth:
        // the densest class, they are all candidates (the credit cuts them
        // short), and none of the large ones.
        assert_eq!(small_kept, 20 * 1024);
        assert_eq!(large_kept, 0, "the large ones go");
    }
}
