//! Test machinery (cargo feature `sim`; no production build has it): the
//! one fault plan ([`Faults`]) that [`FaultBackend`] applies to every kind
//! of file — snapshots and logs written sequentially, files read at
//! offsets, flash files and devices written at offsets — and [`SimFs`], a
//! file system in memory that loses power, on which persistence and the
//! flash tier both run in the crash simulator and in tests. [`Rng`] is the
//! seeded generator they draw schedules and power cuts from.

mod fault;
mod fs;

pub use fault::{FaultBackend, Faults};
pub use fs::SimFs;

/// A small deterministic generator (xorshift64*): enough to draw a
/// schedule or a power cut, the same for a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Any seed but 0 (a fixed point of the shifts).
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_draws_the_same_numbers_and_zero_is_a_seed_too() {
        let draw = |seed| {
            let mut r = Rng::new(seed);
            (0..8).map(|_| r.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(0).iter().any(|&n| n != 0));
        let mut r = Rng::new(3);
        let hits = (0..10_000).filter(|_| r.chance(30)).count();
        assert!((2_500..3_500).contains(&hits), "{hits}");
    }
}
