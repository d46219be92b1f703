//! The soak's history checker: a session's log against what it had to be
//! (what the human sent, what the scripted model answered), counting entries
//! lost, duplicated, reordered and unexpected, and gaps or repeats in `seq`;
//! and a session's `work.log` against the tool calls the script made.

use std::collections::HashMap;

/// What one comparison found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub entries: usize,
    pub expected: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub reordered: usize,
    /// Entries the script never produces (errors, system notes, confusion).
    pub unexpected: usize,
    pub seq_gaps: usize,
    pub seq_repeats: usize,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.entries += other.entries;
        self.expected += other.expected;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.unexpected += other.unexpected;
        self.seq_gaps += other.seq_gaps;
        self.seq_repeats += other.seq_repeats;
    }

    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.reordered == 0
            && self.unexpected == 0
            && self.seq_gaps == 0
            && self.seq_repeats == 0
    }
}

/// Compares a history with what it should be. `seqs` are the entries'
/// sequence numbers in the order read; items must be unique in `expected`.
pub fn check<T: Eq + std::hash::Hash + Clone>(
    expected: &[T],
    actual: &[T],
    seqs: &[u64],
) -> Counts {
    let mut want: HashMap<&T, usize> = HashMap::new();
    for item in expected {
        *want.entry(item).or_default() += 1;
    }
    let mut have: HashMap<&T, usize> = HashMap::new();
    for item in actual {
        *have.entry(item).or_default() += 1;
    }
    let mut counts = Counts {
        entries: actual.len(),
        expected: expected.len(),
        ..Counts::default()
    };
    for (item, n) in &want {
        let got = have.get(item).copied().unwrap_or(0);
        counts.lost += n.saturating_sub(got);
        counts.duplicated += got.saturating_sub(*n);
    }
    counts.unexpected = actual.iter().filter(|i| !want.contains_key(i)).count();
    // Reordered: expected items (first copies) not on the longest run that
    // keeps the expected order.
    let position: HashMap<&T, usize> = expected.iter().enumerate().map(|(i, t)| (t, i)).collect();
    let mut seen = std::collections::HashSet::new();
    let order: Vec<usize> = actual
        .iter()
        .filter(|i| seen.insert(*i))
        .filter_map(|i| position.get(i).copied())
        .collect();
    counts.reordered = order.len() - longest_increasing(&order);
    let mut sorted = seqs.to_vec();
    sorted.sort_unstable();
    counts.seq_repeats = sorted.windows(2).filter(|w| w[0] == w[1]).count();
    sorted.dedup();
    let top = sorted.last().copied().unwrap_or(0);
    counts.seq_gaps = (top as usize).saturating_sub(sorted.len());
    counts.reordered += seqs.windows(2).filter(|w| w[1] < w[0]).count();
    counts
}

fn longest_increasing(xs: &[usize]) -> usize {
    let mut tails: Vec<usize> = Vec::new();
    for &x in xs {
        match tails.binary_search(&x) {
            Ok(_) => {}
            Err(i) if i == tails.len() => tails.push(x),
            Err(i) => tails[i] = x,
        }
    }
    tails.len()
}

/// What `work.log` shows: lines missing, tool runs repeated (a tool whose
/// result was not stored when its worker died runs again), lines out of order.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub lines: usize,
    pub missing: usize,
    pub repeated: usize,
    pub unexpected: usize,
}

pub fn check_work(expected: &[String], lines: &[String]) -> Work {
    let counts = check(expected, lines, &[]);
    Work {
        lines: lines.len(),
        missing: counts.lost,
        repeated: counts.duplicated,
        unexpected: counts.unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_history_counts_nothing() {
        let c = check(&[1, 2, 3], &[1, 2, 3], &[1, 2, 3]);
        assert!(c.clean(), "{c:?}");
    }

    #[test]
    fn lost_duplicated_reordered_and_seq_faults_are_counted() {
        // 2 lost, 4 twice, 5 before 3, an unknown 9; seq 3 missing, 5 repeated.
        let c = check(&[1, 2, 3, 4, 5], &[1, 5, 3, 4, 4, 9], &[1, 2, 4, 5, 5, 6]);
        assert_eq!(
            c,
            Counts {
                entries: 6,
                expected: 5,
                lost: 1,
                duplicated: 1,
                reordered: 1,
                unexpected: 1,
                seq_gaps: 1,
                seq_repeats: 1,
            }
        );
    }
}
