//! The simulator's oracle: memcached's semantics for the requests the
//! workload makes, computed here from the requests alone — never read back
//! from the store under test. Each request's outcome is checked against
//! the store's answer as it runs, and every state the whole key space
//! passes through is kept, so that a recovery can be checked as a prefix
//! of the log across keys.

use std::collections::BTreeMap;

/// What a key holds: value, flags, expiry (server-relative, 0 never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Val {
    pub v: Vec<u8>,
    pub flags: u32,
    pub exp: u32,
}

/// The whole key space.
pub type State = BTreeMap<Vec<u8>, Val>;

/// A request of the workload.
#[derive(Debug, Clone)]
pub enum Op {
    Set { k: Vec<u8>, v: Vec<u8>, flags: u32, exp: u32 },
    Add { k: Vec<u8>, v: Vec<u8>, flags: u32, exp: u32 },
    Append { k: Vec<u8>, data: Vec<u8> },
    Incr { k: Vec<u8>, delta: u64 },
    Delete { k: Vec<u8> },
    Touch { k: Vec<u8>, exp: u32 },
    FlushAll,
}

/// What a request was answered (the store's answer must be the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Stored,
    NotStored,
    Value(u64),
    NotFound,
    NonNumeric,
    Deleted(bool),
    Touched(bool),
    Flushed,
    /// Refused: the durability log had failed.
    Refused,
}

/// The largest value the workload makes (appends included): items stay
/// under `-I`, so no request is refused for size (which the model would
/// have to compute from the item layout).
pub const MAX_VALUE: usize = 3600;

/// memcached's `safe_strtoull` on a stored value.
fn counter(v: &[u8]) -> Option<u64> {
    let start = v.iter().position(|b| !b.is_ascii_whitespace())?;
    let v = &v[start..];
    let v = v.strip_prefix(b"+").unwrap_or(v);
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || v.get(digits).is_some_and(|b| !b.is_ascii_whitespace()) {
        return None;
    }
    std::str::from_utf8(&v[..digits]).ok()?.parse().ok()
}

/// The key space as a client sees it at `now`: expired items are gone.
pub fn visible(s: &State, now: u32) -> State {
    s.iter().filter(|(_, x)| x.exp == 0 || x.exp > now).map(|(k, x)| (k.clone(), x.clone())).collect()
}

/// Applies `op` at server time `now`; its outcome, and whether it changed
/// anything (a change is journaled).
pub fn apply(s: &mut State, op: &Op, now: u32) -> (Outcome, bool) {
    // Expired items are dropped first, as a lookup does.
    let live = |s: &State, k: &[u8]| s.get(k).filter(|x| x.exp == 0 || x.exp > now).cloned();
    match op {
        Op::Set { k, v, flags, exp } => {
            s.insert(k.clone(), Val { v: v.clone(), flags: *flags, exp: *exp });
            (Outcome::Stored, true)
        }
        Op::Add { k, v, flags, exp } => {
            if live(s, k).is_some() {
                return (Outcome::NotStored, false);
            }
            s.insert(k.clone(), Val { v: v.clone(), flags: *flags, exp: *exp });
            (Outcome::Stored, true)
        }
        Op::Append { k, data } => match live(s, k) {
            None => (Outcome::NotStored, false),
            Some(mut x) => {
                x.v.extend_from_slice(data);
                s.insert(k.clone(), x);
                (Outcome::Stored, true)
            }
        },
        Op::Incr { k, delta } => match live(s, k) {
            None => (Outcome::NotFound, false),
            Some(mut x) => match counter(&x.v) {
                None => (Outcome::NonNumeric, false),
                Some(old) => {
                    let new = old.wrapping_add(*delta);
                    let mut v = new.to_string().into_bytes();
                    // A shorter result keeps the value's length (memcached).
                    let len = v.len().max(x.v.len());
                    v.resize(len, b' ');
                    x.v = v;
                    s.insert(k.clone(), x);
                    (Outcome::Value(new), true)
                }
            },
        },
        Op::Delete { k } => {
            let was = live(s, k).is_some();
            s.remove(k);
            (Outcome::Deleted(was), was)
        }
        Op::Touch { k, exp } => match live(s, k) {
            None => (Outcome::Touched(false), false),
            Some(mut x) => {
                let changed = x.exp != *exp;
                x.exp = *exp;
                s.insert(k.clone(), x);
                (Outcome::Touched(true), changed)
            }
        },
        Op::FlushAll => {
            s.clear();
            (Outcome::Flushed, true)
        }
    }
}

/// Every state the key space passed through in one process lifetime (and
/// the state it started from), with what a recovery may find.
#[derive(Debug, Default)]
pub struct History {
    /// `states[i]`: after the first `i` changes of this lifetime.
    pub states: Vec<State>,
    /// For change `i` (1-based, as in `states`): its log position.
    pub at: Vec<u64>,
}

impl History {
    pub fn start(s: State) -> History {
        History { states: vec![s], at: vec![0] }
    }

    /// The state now.
    pub fn now(&self) -> &State {
        self.states.last().unwrap_or_else(|| unreachable!("a history starts with a state"))
    }

    /// The number of changes so far.
    pub fn len(&self) -> usize {
        self.states.len() - 1
    }

    pub fn push(&mut self, s: State, at: u64) {
        self.states.push(s);
        self.at.push(at);
    }

    /// The changes whose log position is at or below `durable`: the
    /// number of the last of them (0: none), in log order.
    pub fn acked_upto(&self, durable: u64) -> usize {
        (1..self.at.len()).take_while(|&i| self.at[i] <= durable).last().unwrap_or(0)
    }

    /// The first `i` in `from..=to` whose state, as seen at `now`, is `got`.
    pub fn find(&self, got: &State, from: usize, to: usize, now: u32) -> Option<usize> {
        (from..=to.min(self.len())).find(|&i| &visible(&self.states[i], now) == got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_memcached() {
        let mut s = State::new();
        let k = b"n".to_vec();
        apply(&mut s, &Op::Set { k: k.clone(), v: b"99".to_vec(), flags: 3, exp: 0 }, 1);
        assert_eq!(apply(&mut s, &Op::Incr { k: k.clone(), delta: 1 }, 1), (Outcome::Value(100), true));
        assert_eq!(s[&k], Val { v: b"100".to_vec(), flags: 3, exp: 0 });
        apply(&mut s, &Op::Set { k: k.clone(), v: b"1000 ".to_vec(), flags: 0, exp: 0 }, 1);
        assert_eq!(apply(&mut s, &Op::Incr { k: k.clone(), delta: u64::MAX }, 1), (Outcome::Value(999), true));
        assert_eq!(s[&k].v, b"999  ");
        // Digits then whitespace: what follows is not looked at.
        apply(&mut s, &Op::Append { k: k.clone(), data: b"x".to_vec() }, 1);
        assert_eq!(apply(&mut s, &Op::Incr { k: k.clone(), delta: 1 }, 1), (Outcome::Value(1000), true));
        apply(&mut s, &Op::Set { k: k.clone(), v: b"12x".to_vec(), flags: 0, exp: 0 }, 1);
        assert_eq!(apply(&mut s, &Op::Incr { k, delta: 1 }, 1), (Outcome::NonNumeric, false));
    }

    #[test]
    fn expired_items_are_gone_for_every_request() {
        let mut s = State::new();
        let k = b"t".to_vec();
        apply(&mut s, &Op::Set { k: k.clone(), v: b"v".to_vec(), flags: 0, exp: 5 }, 1);
        assert_eq!(apply(&mut s, &Op::Touch { k: k.clone(), exp: 0 }, 5), (Outcome::Touched(false), false));
        assert_eq!(apply(&mut s, &Op::Add { k: k.clone(), v: b"w".to_vec(), flags: 0, exp: 0 }, 5).0, Outcome::Stored);
        assert_eq!(visible(&s, 100)[&k].v, b"w");
    }
}
