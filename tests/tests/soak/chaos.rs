//! The soak's fleet and its chaos: a coordinator and several workers run as
//! real processes; every few seconds one of them is killed with SIGKILL and
//! started again, or the nats-server is killed and restarted on its store.
//! Every Orchestrator status is recorded with its arrival time, to measure
//! how long a killed worker's Orchestrators take to be taken over and resumed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbiter_protocol::{OrchestratorState, OrchestratorStatus, subjects};
use futures::StreamExt;
use tokio::process::Child;

use super::script::{Rng, lane_of_orchestrator};
use crate::common::System;

/// One act of chaos.
#[derive(Debug, Clone)]
pub enum Act {
    Coordinator,
    Worker(String),
    Nats,
}

/// The processes of the system under test.
pub struct Fleet {
    coordinator: Child,
    /// `(name, process)`; a restarted worker comes back under a new name.
    workers: Vec<(String, Child)>,
    slots: usize,
    restarts: usize,
    pub acts: Vec<(Act, Instant)>,
}

impl Fleet {
    pub fn start(sys: &System, workers: usize, slots: usize) -> Self {
        Self {
            coordinator: sys.coordinator_process(),
            workers: (0..workers)
                .map(|i| {
                    let name = format!("w{i}");
                    let child = sys.worker_process(&name, slots);
                    (name, child)
                })
                .collect(),
            slots,
            restarts: 0,
            acts: Vec::new(),
        }
    }

    /// One act of chaos, chosen at random, and the restart that follows it.
    pub async fn strike(&mut self, sys: &mut System, rng: &Rng) {
        let pause = Duration::from_millis(rng.range(100, 1500));
        match rng.range(0, 10) {
            0..=3 => {
                let i = rng.range(0, self.workers.len() as u64) as usize;
                let (name, child) = &mut self.workers[i];
                let name = name.clone();
                kill(child).await;
                self.acts.push((Act::Worker(name.clone()), Instant::now()));
                tokio::time::sleep(pause).await;
                self.restarts += 1;
                let new_name = format!(
                    "{}-{}",
                    name.split('-').next().unwrap_or("w"),
                    self.restarts
                );
                self.workers[i] = (new_name.clone(), sys.worker_process(&new_name, self.slots));
            }
            4..=6 => {
                kill(&mut self.coordinator).await;
                self.acts.push((Act::Coordinator, Instant::now()));
                tokio::time::sleep(pause).await;
                self.coordinator = sys.coordinator_process();
            }
            _ => {
                sys.nats.kill();
                self.acts.push((Act::Nats, Instant::now()));
                tokio::time::sleep(pause).await;
                sys.nats.restart().await;
            }
        }
    }

    /// How many acts of each kind: coordinator, worker, nats-server.
    pub fn tally(&self) -> (usize, usize, usize) {
        let mut t = (0, 0, 0);
        for (act, _) in &self.acts {
            match act {
                Act::Coordinator => t.0 += 1,
                Act::Worker(_) => t.1 += 1,
                Act::Nats => t.2 += 1,
            }
        }
        t
    }
}

async fn kill(child: &mut Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Every Orchestrator status, with when it arrived.
#[derive(Clone, Default)]
pub struct Statuses(Arc<Mutex<Vec<(Instant, OrchestratorStatus)>>>);

impl Statuses {
    /// Subscribes (the subscription survives server restarts).
    pub async fn record(sys: &System) -> (Self, tokio::task::JoinHandle<()>) {
        let statuses = Self::default();
        let mut sub = sys
            .bus
            .client
            .subscribe(subjects::ALL_ORCH_STATUS)
            .await
            .unwrap();
        sys.bus.client.flush().await.unwrap();
        let sink = statuses.0.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                if let Ok(status) = serde_json::from_slice::<OrchestratorStatus>(&msg.payload) {
                    sink.lock().unwrap().push((Instant::now(), status));
                }
            }
        });
        (statuses, task)
    }

    fn all(&self) -> Vec<(Instant, OrchestratorStatus)> {
        self.0.lock().unwrap().clone()
    }
}

/// Takeover times after worker kills: detection is kill → the first status
/// of one of its Orchestrators from another worker (the summons came again
/// and was claimed); resume is kill → that Orchestrator's next model call
/// (for those that were working, not waiting for the Arbiter).
pub struct Takeovers {
    pub detection: Vec<Duration>,
    pub resume: Vec<Duration>,
    /// Orchestrators running on killed workers that no other worker took
    /// over (they ended on their own first, or are not seen).
    pub unmatched: usize,
}

pub fn takeovers(
    acts: &[(Act, Instant)],
    statuses: &Statuses,
    calls: &[(String, Instant)],
) -> Takeovers {
    let all = statuses.all();
    let mut out = Takeovers {
        detection: Vec::new(),
        resume: Vec::new(),
        unmatched: 0,
    };
    for (act, killed) in acts {
        let Act::Worker(name) = act else { continue };
        // The Orchestrators it ran: their last status before the kill is its, recent, not stopped.
        let mut victims: Vec<&OrchestratorStatus> = Vec::new();
        for (at, s) in all.iter().filter(|(at, _)| at <= killed) {
            victims.retain(|v| v.orch_id != s.orch_id);
            if &s.worker_id == name
                && s.state != OrchestratorState::Stopped
                && killed.duration_since(*at) < Duration::from_secs(3)
            {
                victims.push(s);
            }
        }
        for victim in victims {
            let taken = all
                .iter()
                .find(|(at, s)| at > killed && s.orch_id == victim.orch_id && &s.worker_id != name);
            let Some((taken_at, _)) = taken else {
                out.unmatched += 1;
                continue;
            };
            out.detection.push(taken_at.duration_since(*killed));
            if victim.state == OrchestratorState::Working {
                let lane = lane_of_orchestrator(&victim.session_id, victim.number);
                if let Some((_, at)) = calls.iter().find(|(l, at)| *l == lane && at > killed) {
                    out.resume.push(at.duration_since(*killed));
                }
            }
        }
    }
    out
}

/// `min / median / max` of some durations, in seconds.
pub fn spread(durations: &[Duration]) -> String {
    if durations.is_empty() {
        return "none measured".into();
    }
    let mut d = durations.to_vec();
    d.sort();
    format!(
        "min {:.2} s, median {:.2} s, max {:.2} s (n = {})",
        d[0].as_secs_f64(),
        d[d.len() / 2].as_secs_f64(),
        d[d.len() - 1].as_secs_f64(),
        d.len()
    )
}
