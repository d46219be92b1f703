//! Which log seqs a console has shown, so that it shows each at most once: a
//! coordinator that publishes an entry again, or anyone who can publish on
//! the log subject, cannot make a line appear twice.

use std::collections::BTreeSet;

/// Seqs held above a gap before the gap is given up on: the log has no gaps,
/// so this bounds the memory a broken or forged log can cost.
const MAX_ABOVE_GAP: usize = 1024;

/// The seqs shown so far: every one up to `through`, and the few above a gap.
#[derive(Debug, Clone, Default)]
pub struct ShownSeqs {
    /// Every seq from 1 to this one has been shown (or given up on).
    through: u64,
    /// Seqs shown above the first one missing.
    above: BTreeSet<u64>,
}

impl ShownSeqs {
    /// Records `seq` as shown; `false` if it was already (a duplicate, to be
    /// skipped). A seq that arrives late, after higher ones, is still shown
    /// once, unless more than [`MAX_ABOVE_GAP`] seqs came after it.
    pub fn first_time(&mut self, seq: u64) -> bool {
        if (seq != 0 && seq <= self.through) || !self.above.insert(seq) {
            return false;
        }
        if self.above.len() > MAX_ABOVE_GAP
            && let Some(lowest) = self.above.pop_first()
        {
            self.through = self.through.max(lowest);
        }
        while self.above.remove(&(self.through + 1)) {
            self.through += 1;
        }
        true
    }

    /// The highest seq shown; 0 before any.
    pub fn highest(&self) -> u64 {
        self.above.last().copied().unwrap_or(0).max(self.through)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn each_seq_is_shown_once() {
        let mut shown = ShownSeqs::default();
        let first: Vec<bool> = [1, 2, 2, 4, 1, 3, 4, 5]
            .into_iter()
            .map(|seq| shown.first_time(seq))
            .collect();
        assert_eq!(
            first,
            [true, true, false, true, false, true, false, true],
            "a late 3 is shown, every repeat is not"
        );
        assert_eq!(shown.highest(), 5);
        assert!(shown.above.is_empty(), "{shown:?}");
    }

    #[test]
    fn a_gap_is_given_up_on_in_the_end() {
        let mut shown = ShownSeqs::default();
        let top = 1 + MAX_ABOVE_GAP as u64;
        for seq in 2..=top {
            assert!(shown.first_time(seq));
        }
        assert_eq!(shown.above.len(), MAX_ABOVE_GAP);
        assert!(shown.first_time(top + 1));
        assert_eq!(
            (shown.through, shown.above.len()),
            (top + 1, 0),
            "held seqs are bounded"
        );
        assert!(!shown.first_time(1), "too late: given up on");
        assert!(!shown.first_time(top));
        assert_eq!(shown.highest(), top + 1);
    }
}
