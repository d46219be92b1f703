//! Taking numbered messages in order. The coordinator numbers its inputs to
//! each Orchestrator and every Orchestrator numbers its outputs, 1, 2, 3…;
//! each reader keeps the last `seq` it took (its high-water mark). Only the
//! next `seq` is taken. One at or below the mark is a duplicate. One further
//! ahead is held aside ([`Gaps`]) for a while, in case the missing ones are
//! delivered again late; held messages are taken in order once the gap
//! fills, and dropped together if it never does. So a message with a forged
//! `seq` (1000, or `u64::MAX`) never moves the mark, and the real sender's
//! next message is still taken.
//!
//! The decisions are pure: time is passed in, and the caller acknowledges,
//! reports and stores.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// Where a `seq` stands against the last one taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// At or below the last one taken: already seen.
    Duplicate,
    /// The one after the last one taken: take it.
    Next,
    /// Further ahead: something before it is missing.
    Ahead,
}

/// Where `seq` stands when `last` is the last one taken.
pub fn order(last: u64, seq: u64) -> Order {
    if seq <= last {
        Order::Duplicate
    } else if seq - last == 1 {
        Order::Next
    } else {
        Order::Ahead
    }
}

/// What [`Gaps::hold`] did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Hold<T> {
    /// Kept aside until the gap before it fills or times out.
    Held,
    /// A message with this `seq` is already held; the new one is handed
    /// back (the caller decides whether it is the same message delivered
    /// again, see [`Gaps::replace`], or another one).
    AlreadyHeld(T),
    /// As many messages as allowed are held already; the new one is handed back.
    Full(T),
}

/// A gap that stayed open for the whole wait: what was held behind it.
#[derive(Debug, PartialEq, Eq)]
pub struct Expired<T> {
    /// The held messages, by `seq`, all dropped.
    pub dropped: Vec<(u64, T)>,
    /// Messages turned away meanwhile because too many were held.
    pub turned_away: u64,
}

/// Messages held aside because they came ahead of their turn.
///
/// The gap's clock starts when the first message is held and starts again
/// each time the reader takes a message (the gap after it is a new one), so a
/// gap is dropped only when nothing was taken for the whole wait.
#[derive(Debug)]
pub struct Gaps<T> {
    held: BTreeMap<u64, T>,
    /// When the current gap opened; `None` while nothing is held.
    opened: Option<Instant>,
    wait: Duration,
    capacity: usize,
    turned_away: u64,
}

impl<T> Gaps<T> {
    /// Holds at most `capacity` messages, each gap for at most `wait`.
    pub fn new(wait: Duration, capacity: usize) -> Self {
        Self {
            held: BTreeMap::new(),
            opened: None,
            wait,
            capacity,
            turned_away: 0,
        }
    }

    /// How long a gap may stay open.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The message held under `seq`, if any.
    pub fn get(&self, seq: u64) -> Option<&T> {
        self.held.get(&seq)
    }

    /// Keeps a message that came ahead of its turn (see [`Order::Ahead`]).
    pub fn hold(&mut self, seq: u64, item: T, now: Instant) -> Hold<T> {
        if self.held.contains_key(&seq) {
            return Hold::AlreadyHeld(item);
        }
        if self.held.len() >= self.capacity {
            self.turned_away += 1;
            return Hold::Full(item);
        }
        self.held.insert(seq, item);
        self.opened.get_or_insert(now);
        Hold::Held
    }

    /// Puts a later delivery of a held message in its place; returns the earlier one.
    pub fn replace(&mut self, seq: u64, item: T) -> Option<T> {
        self.held.insert(seq, item)
    }

    /// The reader has just taken `last`: the gap after it opens now, and the
    /// held message that follows it, if there is one, is handed out to be
    /// taken next.
    pub fn next_after(&mut self, last: u64, now: Instant) -> Option<(u64, T)> {
        let next = last
            .checked_add(1)
            .and_then(|seq| self.held.remove(&seq).map(|item| (seq, item)));
        self.opened = (!self.held.is_empty()).then_some(now);
        next
    }

    /// When the open gap times out, if one is open.
    pub fn deadline(&self) -> Option<Instant> {
        self.opened.map(|opened| opened + self.wait)
    }

    /// Drops everything held once the gap has been open for the whole wait.
    pub fn expire(&mut self, now: Instant) -> Option<Expired<T>> {
        if self.deadline().is_none_or(|deadline| now < deadline) {
            return None;
        }
        Some(self.drain())
    }

    /// Everything held, now, whether or not the gap timed out (the reader
    /// is stopping, or what it waited for is no longer wanted).
    pub fn drain(&mut self) -> Expired<T> {
        self.opened = None;
        Expired {
            dropped: std::mem::take(&mut self.held).into_iter().collect(),
            turned_away: std::mem::take(&mut self.turned_away),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn orders() {
        for (last, seq, want) in [
            (0, 0, Order::Duplicate),
            (0, 1, Order::Next),
            (0, 2, Order::Ahead),
            (5, 3, Order::Duplicate),
            (5, 5, Order::Duplicate),
            (5, 6, Order::Next),
            (0, 1000, Order::Ahead),
            (0, u64::MAX, Order::Ahead),
            (u64::MAX - 1, u64::MAX, Order::Next),
            (u64::MAX, u64::MAX, Order::Duplicate),
        ] {
            assert_eq!(order(last, seq), want, "last {last}, seq {seq}");
        }
    }

    #[test]
    fn a_gap_that_fills_releases_what_was_held_in_order() {
        let t0 = Instant::now();
        let mut gaps = Gaps::new(WAIT, 8);
        assert_eq!(gaps.hold(4, "four", t0), Hold::Held);
        assert_eq!(gaps.hold(3, "three", t0), Hold::Held);
        assert_eq!(gaps.deadline(), Some(t0 + WAIT));
        // 1 taken: 2 is still missing, and the gap after 1 opens now.
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(gaps.next_after(1, t1), None);
        assert_eq!(gaps.deadline(), Some(t1 + WAIT));
        // 2 taken: 3 and 4 follow.
        assert_eq!(gaps.next_after(2, t1), Some((3, "three")));
        assert_eq!(gaps.next_after(3, t1), Some((4, "four")));
        assert_eq!(gaps.deadline(), None);
        assert!(gaps.is_empty());
        assert_eq!(gaps.next_after(4, t1), None);
    }

    #[test]
    fn a_gap_that_never_fills_drops_what_was_held_after_the_wait() {
        let t0 = Instant::now();
        let mut gaps = Gaps::new(WAIT, 8);
        assert_eq!(gaps.hold(1000, 'a', t0), Hold::Held);
        assert_eq!(gaps.hold(u64::MAX, 'b', t0), Hold::Held);
        assert_eq!(gaps.expire(t0 + WAIT - Duration::from_millis(1)), None);
        assert_eq!(
            gaps.expire(t0 + WAIT),
            Some(Expired {
                dropped: vec![(1000, 'a'), (u64::MAX, 'b')],
                turned_away: 0,
            })
        );
        assert!(gaps.is_empty());
        assert_eq!(gaps.deadline(), None);
        assert_eq!(gaps.expire(t0 + WAIT * 2), None);
        // Nothing after u64::MAX can follow it.
        assert_eq!(gaps.hold(u64::MAX, 'c', t0), Hold::Held);
        assert_eq!(gaps.next_after(u64::MAX, t0), None);
    }

    #[test]
    fn a_seq_held_twice_and_a_full_gap_are_handed_back() {
        let t0 = Instant::now();
        let mut gaps = Gaps::new(WAIT, 2);
        assert_eq!(gaps.hold(5, "first", t0), Hold::Held);
        assert_eq!(gaps.hold(5, "again", t0), Hold::AlreadyHeld("again"));
        assert_eq!(gaps.get(5), Some(&"first"));
        assert_eq!(gaps.replace(5, "again"), Some("first"));
        assert_eq!(gaps.hold(6, "six", t0), Hold::Held);
        assert_eq!(gaps.hold(7, "seven", t0), Hold::Full("seven"));
        assert_eq!(
            gaps.drain(),
            Expired {
                dropped: vec![(5, "again"), (6, "six")],
                turned_away: 1,
            }
        );
    }
}
