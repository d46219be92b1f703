//! The levels side by side: what one routed message, one session, one
//! Orchestrator and one takeover cost at each session count, from figures
//! measured in the same run, and how flat that is from 100 sessions up.

use std::time::Duration;

use crate::hist::{bytes, count};
use crate::levels::Level;

/// #39: CPU per routed message at the largest level at most this many
/// times its value at [`FLAT_FROM`] sessions.
pub const FLATNESS: f64 = 1.5;
/// The level the flatness is measured against.
pub const FLAT_FROM: u32 = 100;
/// #39: a new coordinator owns all of a dead one's sessions within this.
pub const TAKEOVER: Duration = Duration::from_secs(30);

/// A process's CPU over a window, as a share of one core; the workers summed.
fn share(cpu: &[(String, f64)], process: &str) -> f64 {
    cpu.iter()
        .filter(|(name, _)| match process {
            "worker" => name.starts_with("worker"),
            _ => name == process,
        })
        .map(|(_, share)| share)
        .sum()
}

/// The processes the table breaks CPU down by.
pub const PROCESSES: [&str; 3] = ["nats-server", "coordinator", "worker"];

/// What a level's figures come to per unit.
#[derive(Debug, Clone, PartialEq)]
pub struct PerUnit {
    pub sessions: u64,
    pub orchestrators: u64,
    /// The worst hop's p99 over the publish-ack p99 measured beside it.
    pub hop_over_ack: Option<f64>,
    /// CPU µs per routed message, by [`PROCESSES`].
    pub per_message: [Option<f64>; 3],
    /// CPU µs per second per session with nothing routed, by [`PROCESSES`].
    pub idle_per_session: [f64; 3],
    /// Resident bytes: coordinator and nats-server per session, the
    /// worker per Orchestrator.
    pub coordinator_per_session: f64,
    pub nats_per_session: f64,
    pub worker_per_orchestrator: f64,
}

impl PerUnit {
    pub fn of(level: &Level) -> PerUnit {
        let sessions = level.all_sessions();
        let orchestrators = level.all_orchestrators();
        let ack = level.probe.js_ack.p99().as_secs_f64();
        let worst = level.hops.iter().map(|h| h.p99()).max().unwrap_or_default();
        let hop_over_ack = (ack > 0.0 && level.hops.iter().all(|h| h.len() > 0))
            .then(|| worst.as_secs_f64() / ack);
        // Each measured tick is routed three times: to the Arbiter, to the
        // Orchestrator, back.
        let routed = 3 * level.driven.measured;
        let per_message = PROCESSES.map(|p| {
            (routed > 0).then(|| share(&level.cpu, p) * level.measure_secs * 1e6 / routed as f64)
        });
        let n = sessions.max(1) as f64;
        let idle_per_session = PROCESSES.map(|p| share(&level.idle_cpu, p) * 1e6 / n);
        let [empty, idle] = level.memory;
        let delta = |after: u64, before: u64| after as f64 - before as f64;
        PerUnit {
            sessions,
            orchestrators,
            hop_over_ack,
            per_message,
            idle_per_session,
            coordinator_per_session: delta(idle.coordinator, empty.coordinator) / n,
            nats_per_session: delta(idle.nats, empty.nats) / n,
            worker_per_orchestrator: delta(idle.worker, empty.worker) / orchestrators.max(1) as f64,
        }
    }

    /// CPU µs per routed message, the three processes together.
    pub fn per_message_total(&self) -> Option<f64> {
        self.per_message.iter().copied().sum()
    }
}

/// The largest level's per-message CPU over [`FLAT_FROM`]'s: (its session
/// count, the ratio).
pub fn flatness(levels: &[Level]) -> Option<(u32, f64)> {
    let from = levels.iter().find(|l| l.sessions == FLAT_FROM)?;
    let top = levels.iter().max_by_key(|l| l.sessions)?;
    if top.sessions <= FLAT_FROM {
        return None;
    }
    let base = PerUnit::of(from).per_message_total()?;
    let top_cost = PerUnit::of(top).per_message_total()?;
    (base > 0.0).then(|| (top.sessions, top_cost / base))
}

fn cells(values: impl IntoIterator<Item = String>) -> String {
    values.into_iter().map(|v| format!("{v:>16}")).collect()
}

/// The table: one column per level.
pub fn print(levels: &[Level]) {
    if levels.is_empty() {
        return;
    }
    let units: Vec<PerUnit> = levels.iter().map(PerUnit::of).collect();
    let row = |label: &str, values: Vec<String>| println!("  {label:<50}{}", cells(values));
    println!();
    println!(
        "{:<52}{}",
        "Scale: the levels side by side (one run)",
        cells(
            levels
                .iter()
                .map(|l| format!("{} s.", count(u64::from(l.sessions))))
        )
    );
    row(
        "sessions in all (of them teams of 3)",
        levels
            .iter()
            .map(|l| format!("{} ({})", count(l.all_sessions()), l.crews))
            .collect(),
    );
    row(
        "Orchestrators held (of them parked)",
        levels
            .iter()
            .map(|l| format!("{} ({})", count(l.orchestrators), count(l.parked)))
            .collect(),
    );
    row(
        "worst hop p99 ÷ publish-ack p99 beside it",
        units
            .iter()
            .map(|u| u.hop_over_ack.map_or("-".into(), |r| format!("{r:.1}×")))
            .collect(),
    );
    for (i, process) in PROCESSES.iter().enumerate() {
        row(
            &format!("CPU per routed message, {process}"),
            units
                .iter()
                .map(|u| u.per_message[i].map_or("-".into(), |us| format!("{us:.0} µs")))
                .collect(),
        );
    }
    row(
        "CPU per routed message, the three",
        units
            .iter()
            .map(|u| {
                u.per_message_total()
                    .map_or("-".into(), |us| format!("{us:.0} µs"))
            })
            .collect(),
    );
    for (i, process) in PROCESSES.iter().enumerate() {
        row(
            &format!("idle CPU per session, {process} (µs/s)"),
            units
                .iter()
                .map(|u| format!("{:.1}", u.idle_per_session[i]))
                .collect(),
        );
    }
    row(
        "memory per session, coordinator",
        units
            .iter()
            .map(|u| bytes(u.coordinator_per_session))
            .collect(),
    );
    row(
        "memory per session, nats-server",
        units.iter().map(|u| bytes(u.nats_per_session)).collect(),
    );
    row(
        "memory per Orchestrator (most parked), worker",
        units
            .iter()
            .map(|u| bytes(u.worker_per_orchestrator))
            .collect(),
    );
    row(
        "takeover: kill → new coordinator owns all",
        levels
            .iter()
            .map(|l| match &l.takeover {
                Some(t) => match t.all {
                    Some(all) => format!("{:.1} s", all.as_secs_f64()),
                    None => format!("{}/{}", count(t.taken), count(t.sessions)),
                },
                None => "-".into(),
            })
            .collect(),
    );
    row(
        "takeover: kill → first session owned",
        levels
            .iter()
            .map(|l| {
                l.takeover
                    .as_ref()
                    .and_then(|t| t.first)
                    .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()))
            })
            .collect(),
    );
    if let Some((top, ratio)) = flatness(levels) {
        println!(
            "  flatness: CPU per routed message at {} sessions ÷ at {}: {ratio:.2}× (target ≤ {FLATNESS}×)",
            count(u64::from(top)),
            count(u64::from(FLAT_FROM)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_sum_the_workers_and_name_the_rest() {
        let cpu = vec![
            ("nats-server".to_owned(), 0.2),
            ("coordinator".to_owned(), 0.1),
            ("worker-0".to_owned(), 0.3),
            ("worker-1".to_owned(), 0.1),
            ("bench+mock".to_owned(), 0.5),
        ];
        assert!((share(&cpu, "worker") - 0.4).abs() < 1e-9);
        assert!((share(&cpu, "nats-server") - 0.2).abs() < 1e-9);
        assert_eq!(share(&cpu, "others"), 0.0);
    }
}
