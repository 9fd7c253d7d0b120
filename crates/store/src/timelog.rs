//! When the items of a segment were written, to the second, without a
//! timestamp in every item.
//!
//! Segments are append-only, so write time grows with the offset: a segment
//! keeps a short list of marks "from offset `o` on, items were written at
//! second `t`", one mark per second in which it was written to. An item's
//! write time is the mark at or before its offset. This serves the meta
//! protocol's `l` flag and `me`'s `la` at a cost of one mark per segment per
//! second of writing instead of four bytes per item.
//!
//! A segment written to over more than [`MAX_MARKS`] distinct seconds (a
//! slow trickle of writes) drops every other mark: items then read as written
//! somewhat earlier than they were, never later.

/// Marks kept per segment (8 bytes each).
pub const MAX_MARKS: usize = 64;

/// The marks of one segment, as `(offset << 32) | time`.
#[derive(Debug, Default)]
pub struct TimeLog {
    marks: Vec<u64>,
}

fn off_of(m: u64) -> u32 {
    (m >> 32) as u32
}

fn time_of(m: u64) -> u32 {
    m as u32
}

impl TimeLog {
    /// Forgets every mark (the segment is being reused).
    pub fn clear(&mut self) {
        self.marks.clear();
    }

    /// The earliest time noted (items copied forward keep theirs, so not
    /// necessarily the first mark).
    pub fn earliest(&self) -> Option<u32> {
        self.marks.iter().map(|&m| time_of(m)).min()
    }

    /// The latest time noted: no item in the segment was written after it
    /// (dropping marks only moves times earlier).
    pub fn latest(&self) -> Option<u32> {
        self.marks.iter().map(|&m| time_of(m)).max()
    }

    /// Records that the item at `off` (at or after every earlier mark) was
    /// written at `time`.
    pub fn note(&mut self, off: u32, time: u32) {
        if self.marks.last().is_some_and(|&m| time_of(m) == time) {
            return;
        }
        if self.marks.len() == MAX_MARKS {
            let mut i = 0;
            self.marks.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
        self.marks.push((u64::from(off) << 32) | u64::from(time));
    }

    /// When the item at `off` was written, if any mark covers it.
    pub fn time_at(&self, off: u32) -> Option<u32> {
        let i = self.marks.partition_point(|&m| off_of(m) <= off);
        i.checked_sub(1).map(|i| time_of(self.marks[i]))
    }

    #[cfg(test)]
    pub fn marks(&self) -> usize {
        self.marks.len()
    }

    /// Every mark, oldest first, as `(offset, time)`.
    pub fn to_vec(&self) -> Vec<(u32, u32)> {
        self.marks.iter().map(|&m| (off_of(m), time_of(m))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_read_the_mark_at_or_before_them() {
        let mut t = TimeLog::default();
        assert_eq!(t.time_at(0), None);
        t.note(0, 10);
        t.note(100, 10);
        t.note(200, 12);
        t.note(300, 15);
        assert_eq!(t.marks(), 3, "one mark per second");
        assert_eq!(t.time_at(0), Some(10));
        assert_eq!(t.time_at(199), Some(10));
        assert_eq!(t.time_at(200), Some(12));
        assert_eq!(t.time_at(5000), Some(15));
        // An item copied forward keeps its older time: the latest is
        // still the newest written, whatever the order of the marks.
        t.note(400, 11);
        assert_eq!((t.earliest(), t.latest(), t.time_at(400)), (Some(10), Some(15), Some(11)));
        t.clear();
        assert_eq!((t.time_at(300), t.latest()), (None, None));
    }

    #[test]
    fn a_full_log_thins_and_never_reports_later_than_written() {
        let mut t = TimeLog::default();
        for i in 0..1000u32 {
            t.note(i * 10, 100 + i);
            assert!(t.marks() <= MAX_MARKS);
        }
        for i in 0..1000u32 {
            let at = t.time_at(i * 10).unwrap_or(u32::MAX);
            assert!(at <= 100 + i, "item {i} reads {at}");
        }
        assert_eq!(t.time_at(9990), Some(1099), "the newest mark survives thinning");
    }
}
