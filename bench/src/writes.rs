//! Where the saturation run's stored messages go: each stream's new
//! messages per routed message and, with `--subjects`, the messages
//! published per subject pattern (ids replaced by `*`), counted by a
//! subscription of the benchmark's own (it costs the server a copy of each,
//! so it is off by default and the CPU figures of such a run are not the
//! ones to compare).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;

/// Each stream's last sequence, by name (the benchmark's own streams left out).
pub async fn stream_seqs(bus: &arbiter_bus::Bus) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut seqs = BTreeMap::new();
    let mut streams = bus.js.streams();
    while let Some(info) = streams.next().await {
        let info = info?;
        if !info.config.name.starts_with("BENCH_") {
            seqs.insert(info.config.name.clone(), info.state.last_sequence);
        }
    }
    Ok(seqs)
}

/// Messages stored per stream between two readings.
pub fn grown(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    after
        .iter()
        .map(|(name, seq)| {
            (
                name.clone(),
                seq.saturating_sub(before.get(name).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Counts every message published on Arbiter's subjects, KV and object
/// store puts included, by pattern, until dropped.
pub struct SubjectCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SubjectCounter {
    pub async fn start(client: &async_nats::Client) -> anyhow::Result<Self> {
        let counts = Arc::new(Mutex::new(BTreeMap::new()));
        let mut subs = Vec::new();
        for subject in ["arbiter.>", "$KV.>", "$O.>"] {
            subs.push(client.subscribe(subject).await?);
        }
        client.flush().await?;
        let mut all = futures::stream::select_all(subs);
        let sink = counts.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = all.next().await {
                let key = pattern(&msg.subject);
                *sink
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(key)
                    .or_insert(0) += 1;
            }
        });
        Ok(Self { counts, task })
    }

    /// The counts so far, largest first.
    pub fn take(self) -> Vec<(String, u64)> {
        self.task.abort();
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut counts: Vec<_> = counts.into_iter().collect();
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        counts
    }
}

/// A subject with its ids replaced by `*`: `arbiter.v1.orch.*.out`,
/// `$KV.arbiter_sessions.*`, `$O.arbiter_orch_blobs.C.*`.
fn pattern(subject: &str) -> String {
    let tokens: Vec<&str> = subject.split('.').collect();
    let keep: Vec<&str> = match tokens.as_slice() {
        [
            "arbiter",
            v,
            kind @ ("session" | "orch" | "coordinator"),
            _,
            rest @ ..,
        ] => {
            let mut t = vec!["arbiter", v, kind, "*"];
            t.extend(rest.iter().take(1));
            t
        }
        ["$KV", bucket, ..] => vec!["$KV", bucket, "*"],
        ["$O", bucket, kind, ..] => vec!["$O", bucket, kind, "*"],
        other => other.to_vec(),
    };
    keep.join(".")
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn ids_become_stars() {
        assert_eq!(
            pattern("arbiter.v1.orch.abc-1.out"),
            "arbiter.v1.orch.*.out"
        );
        assert_eq!(
            pattern("arbiter.v1.session.s1.human.console"),
            "arbiter.v1.session.*.human"
        );
        assert_eq!(pattern("$KV.arbiter_sessions.s1"), "$KV.arbiter_sessions.*");
        assert_eq!(
            pattern("arbiter.v1.summon.default"),
            "arbiter.v1.summon.default"
        );
    }
}
