//! The router: a `match` on the Arbiter's intent. Each decision becomes log
//! entries and effects (summons, inputs, releases) of the current step; they
//! are published once the step is stored.

use arbiter_protocol::{
    ArbiterEntry, ArbiterIntent, ArbiterOutput, ArbiterToOrchestratorEntry, Control, ControlAction,
    Directive, ErrorEntry, LogBody, MusingEntry, OrchestratorInput, ReleasedEntry, Summon,
    SummonStrategy, SummonedEntry, SystemEntry, VERSION, WireError, orchestrator_name,
};
use chrono::Utc;

use crate::fleet::Offer;
use crate::session::{Input, Session};
use crate::state::{Active, Effect, Pending};

/// What the workers that are up offered, as the session saw them before it
/// routed a summons (the router itself does not wait on the bus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FleetView {
    /// Not asked: the summons named no pool and no runtime.
    NotAsked,
    /// The workers could not be asked; a directed summons goes ahead.
    Unknown,
    /// What the workers that answered offer.
    Seen(Vec<Offer>),
}

impl FleetView {
    /// Whether the session must ask the workers before routing `output`.
    pub(crate) fn wanted(output: &ArbiterOutput) -> bool {
        output.intent == ArbiterIntent::SummonOrchestrator
            && (output.pool.is_some() || output.runtime.is_some() || emergency(output))
    }
}

/// Where a summons goes, once it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub pool: String,
    pub runtime: Option<String>,
    /// The Arbiter named the pool or the runtime.
    pub directed: bool,
    /// Which lane of the pool it goes on.
    pub lane: Lane,
}

/// A pool's two lanes for summonses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// `summon.<pool>`, in turn with the queued work.
    Queued,
    /// An emergency: `summon.<pool>.urgent`, served before the queue.
    Urgent,
    /// An emergency no worker of the pool takes from the urgent lane (a
    /// worker of protocol v1 before it, the Python reference worker): it
    /// goes in turn rather than wait for ever, and the log says so.
    UrgentUnserved,
}

/// Whether the Arbiter declared the summons an emergency.
fn emergency(output: &ArbiterOutput) -> bool {
    output.emergency == Some(true)
}

/// The summons decision, pure: where `output` goes given the coordinator's
/// own pool and runtime and what the fleet offers, or why it cannot go.
pub(crate) fn summons_target(
    output: &ArbiterOutput,
    own_pool: &str,
    own_runtime: Option<&str>,
    fleet: &FleetView,
) -> Result<Target, String> {
    if output.message.trim().is_empty() {
        return Err("a summons needs a brief, and the message was empty.".to_owned());
    }
    match output.strategy.unwrap_or_default() {
        SummonStrategy::Solo => {}
        other => {
            return Err(format!(
                "the strategy {:?} is not available yet: only solo. Summon one \
                 Orchestrator (strategy solo, or leave it out).",
                other.as_str()
            ));
        }
    }
    let pool = output.pool.clone().unwrap_or_else(|| own_pool.to_owned());
    if !arbiter_protocol::subjects::is_valid_token(&pool) {
        return Err(format!(
            "{pool:?} is not a pool name (letters, digits, - or _), so nothing was summoned."
        ));
    }
    let runtime = match output.runtime {
        Some(r) => Some(r.as_str().to_owned()),
        None => own_runtime.map(str::to_owned),
    };
    let directed = output.pool.is_some() || output.runtime.is_some();
    let lane = match (emergency(output), fleet) {
        (false, _) => Lane::Queued,
        // Asked and seen: only a worker that serves the urgent lane will do.
        (true, FleetView::Seen(offers)) => {
            if offers.iter().any(|o| o.pool == pool && o.urgent) {
                Lane::Urgent
            } else {
                Lane::UrgentUnserved
            }
        }
        // Not known: the urgent lane could be left unserved, so the queue.
        (true, _) => Lane::UrgentUnserved,
    };
    if let (true, FleetView::Seen(offers)) = (directed, fleet) {
        let in_pool: Vec<&Offer> = offers.iter().filter(|o| o.pool == pool).collect();
        if in_pool.is_empty() {
            let mut pools: Vec<&str> = offers.iter().map(|o| o.pool.as_str()).collect();
            pools.sort_unstable();
            pools.dedup();
            let served = if pools.is_empty() {
                "no worker answered at all".to_owned()
            } else {
                format!("pools served now: {}", pools.join(", "))
            };
            return Err(format!(
                "no worker serves the pool {pool:?} ({served}), so nothing was summoned. \
                 Leave the pool out for the usual one, or tell the human."
            ));
        }
        if let Some(wanted) = &runtime
            && !in_pool.iter().any(|o| &o.runtime == wanted)
        {
            let mut runtimes: Vec<&str> = in_pool.iter().map(|o| o.runtime.as_str()).collect();
            runtimes.sort_unstable();
            runtimes.dedup();
            return Err(format!(
                "no worker of the pool {pool:?} offers the runtime {wanted:?} (runtimes \
                 offered there: {}), so nothing was summoned. Leave the runtime out, or \
                 tell the human.",
                runtimes.join(", ")
            ));
        }
    }
    Ok(Target {
        pool,
        runtime,
        directed,
        lane,
    })
}

impl Session {
    /// Carries out one Arbiter decision; `fleet` is what the workers offered
    /// when the decision is a directed summons (`FleetView::wanted`).
    pub(crate) fn route(&mut self, output: ArbiterOutput, fleet: &FleetView) {
        let target = (output.intent == ArbiterIntent::SummonOrchestrator).then(|| {
            summons_target(
                &output,
                &self.shared.config.pool,
                self.shared.config.orchestrator_runtime.as_deref(),
                fleet,
            )
        });
        let ArbiterOutput {
            intent,
            message,
            memory,
            directive,
            ..
        } = output;
        self.remember_facts(memory.unwrap_or_default());
        match intent {
            ArbiterIntent::AddressHuman => {
                self.state.rejections = 0;
                self.log(LogBody::Arbiter(ArbiterEntry { text: message }));
            }
            ArbiterIntent::AddressOrchestrator => match self.state.active.clone() {
                Some(active) => {
                    self.state.rejections = 0;
                    self.send_to_orchestrator(active, message);
                }
                None => self.reject(
                    intent,
                    "no Orchestrator is active, so the message was not delivered. \
                     Speak to the human, or summon an Orchestrator with a complete brief.",
                ),
            },
            ArbiterIntent::SummonOrchestrator => match target {
                Some(Ok(target)) => {
                    self.state.rejections = 0;
                    self.release_active();
                    self.summon(message, target, directive);
                }
                Some(Err(reason)) => self.reject(intent, &reason),
                None => unreachable!("a summons always has a target decision"),
            },
            ArbiterIntent::ReleaseOrchestrators => {
                self.state.rejections = 0;
                self.release_active();
                if !message.trim().is_empty() {
                    self.log(LogBody::Arbiter(ArbiterEntry { text: message }));
                }
            }
            ArbiterIntent::Musings => {
                self.state.rejections = 0;
                self.log(LogBody::Musing(MusingEntry { text: message }));
            }
        }
    }

    /// An intent that cannot be carried out goes back to the Arbiter as a
    /// system note, a bounded number of times in a row.
    fn reject(&mut self, intent: ArbiterIntent, reason: &str) {
        self.state.rejections += 1;
        if self.state.rejections > self.shared.config.intent_retries {
            self.state.rejections = 0;
            let error = WireError::IntentRejected {
                intent,
                reason: reason.to_owned(),
            };
            self.log(LogBody::Error(ErrorEntry { error }));
            return;
        }
        let text = format!(
            "Your {} could not be carried out: {reason}",
            intent.as_str()
        );
        self.log(LogBody::System(SystemEntry { text: text.clone() }));
        self.enqueue(Pending::System { text });
    }

    fn send_to_orchestrator(&mut self, active: Active, text: String) {
        self.note_to_orchestrator(&text);
        let seq = active.inputs_sent + 1;
        if let Some(a) = self.state.active.as_mut() {
            a.inputs_sent = seq;
            a.asked = false;
            a.reminded = false;
        }
        self.log(LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
            number: active.number,
            orch_id: active.orch_id.clone(),
            text: text.clone(),
        }));
        let budget = self.allowance(&active.orch_id);
        self.effect(Effect::Input(OrchestratorInput {
            v: VERSION,
            session_id: self.id.clone(),
            orch_id: active.orch_id,
            seq,
            message: text,
            sent_at: Utc::now(),
            budget,
        }));
    }

    fn summon(&mut self, brief: String, target: Target, directive: Option<Directive>) {
        self.state.summoned += 1;
        self.new_exchange();
        let number = self.state.summoned;
        let orch_id = uuid::Uuid::now_v7().to_string();
        let Target {
            pool,
            runtime,
            directed,
            lane,
        } = target;
        self.state.active = Some(Active {
            orch_id: orch_id.clone(),
            number,
            inputs_sent: 0,
            outputs_seen: 0,
            asked: false,
            reminded: false,
        });
        self.log(LogBody::Summoned(SummonedEntry {
            number,
            orch_id: orch_id.clone(),
            pool: pool.clone(),
            brief: brief.clone(),
        }));
        if directed || directive.is_some() {
            // The record of where it went and on whose words.
            let text = direction_note(number, &pool, runtime.as_deref(), directive.as_ref());
            self.log(LogBody::System(SystemEntry { text }));
        }
        let roman = arbiter_protocol::roman(number);
        match lane {
            Lane::Queued => {}
            Lane::Urgent => self.log(LogBody::System(SystemEntry {
                text: format!(
                    "Orchestrator {roman} is an emergency: it goes ahead of the work queued in the pool {pool}."
                ),
            })),
            Lane::UrgentUnserved => self.log(LogBody::System(SystemEntry {
                text: format!(
                    "Orchestrator {roman} is an emergency, but no worker of the pool {pool} was seen serving the emergency lane: it waits its turn with the queued work."
                ),
            })),
        }
        tracing::info!(orch.id = %orch_id, number, pool = %pool, runtime = ?runtime, directed, ?lane, "summoning an Orchestrator");
        // The predecessor's packet goes as it was written, not through the Arbiter.
        let handoff = self.state.handoff.take();
        // Sent now, or once the budget allows (`budget.rs`).
        self.send_summons(Summon {
            v: VERSION,
            session_id: self.id.clone(),
            orch_id: orch_id.clone(),
            number,
            brief,
            workspace: None,
            pool: pool.clone(),
            summoned_at: Utc::now(),
            runtime,
            handoff,
            budget: None,
            emergency: lane == Lane::Urgent,
        });
        // Off the session's path: a summons nobody can take is worth a word.
        let (shared, inbox) = (self.shared.clone(), self.inbox.clone());
        tokio::spawn(async move {
            if !shared.fleet.pool_served(&shared.bus.client, &pool).await
                && let Some(inbox) = inbox.upgrade()
            {
                let _ = inbox.send(Input::NoWorker { orch_id, pool }).await;
            }
        });
    }

    /// Releases the active Orchestrator, if any: tells its worker and logs it.
    fn release_active(&mut self) {
        let Some(active) = self.state.active.take() else {
            return;
        };
        self.effect(Effect::Control(Control {
            v: VERSION,
            orch_id: active.orch_id.clone(),
            action: ControlAction::Release,
            sent_at: Utc::now(),
        }));
        self.state.notes.retain(|(n, _)| *n != active.number);
        self.log(LogBody::Released(ReleasedEntry {
            numbers: vec![active.number],
        }));
    }
}

/// The log's note on a directed summons: where it goes, and the human's
/// words behind it, verbatim.
fn direction_note(
    number: u32,
    pool: &str,
    runtime: Option<&str>,
    directive: Option<&Directive>,
) -> String {
    let name = orchestrator_name(number);
    let mut text = format!(
        "{name} is summoned to the pool {pool:?} on the runtime {:?}.",
        runtime.unwrap_or("any")
    );
    if let Some(d) = directive {
        text.push_str(&format!(" The human's directive, verbatim: {:?}", d.words));
        match (&d.parsed, d.confidence) {
            (Some(p), Some(c)) => text.push_str(&format!(" (read as: {p}; confidence {c} %)")),
            (Some(p), None) => text.push_str(&format!(" (read as: {p})")),
            (None, Some(c)) => text.push_str(&format!(" (confidence {c} %)")),
            (None, None) => {}
        }
        text.push('.');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::OrchestratorRuntime;

    fn offer(pool: &str, runtime: &str) -> Offer {
        Offer {
            pool: pool.into(),
            runtime: runtime.into(),
            urgent: true,
        }
    }

    fn summons(brief: &str) -> ArbiterOutput {
        ArbiterOutput::new(ArbiterIntent::SummonOrchestrator, brief)
    }

    #[test]
    fn the_summons_decision_table() {
        let fleet = FleetView::Seen(vec![
            offer("default", "native"),
            offer("review", "native"),
            offer("review", "codex"),
        ]);
        let nobody = FleetView::Seen(Vec::new());
        let with = |f: &dyn Fn(&mut ArbiterOutput)| {
            let mut o = summons("Review the parser.");
            f(&mut o);
            o
        };
        let ok = |pool: &str, runtime: Option<&str>, directed: bool| -> Result<Target, &str> {
            Ok(Target {
                pool: pool.into(),
                runtime: runtime.map(Into::into),
                directed,
                lane: Lane::Queued,
            })
        };
        let cases: Vec<(&str, ArbiterOutput, &FleetView, Result<Target, &str>)> = vec![
            (
                "solo, undirected: the coordinator's own pool and runtime",
                summons("Review the parser."),
                &FleetView::NotAsked,
                ok("default", None, false),
            ),
            (
                "solo named explicitly",
                with(&|o| o.strategy = Some(SummonStrategy::Solo)),
                &FleetView::NotAsked,
                ok("default", None, false),
            ),
            (
                "a pool that is served",
                with(&|o| o.pool = Some("review".into())),
                &fleet,
                ok("review", None, true),
            ),
            (
                "a runtime offered in the pool",
                with(&|o| {
                    o.pool = Some("review".into());
                    o.runtime = Some(OrchestratorRuntime::Codex);
                }),
                &fleet,
                ok("review", Some("codex"), true),
            ),
            (
                "the fleet could not be asked: it goes ahead",
                with(&|o| o.pool = Some("elsewhere".into())),
                &FleetView::Unknown,
                ok("elsewhere", None, true),
            ),
            (
                "a pool name that cannot be a subject token",
                with(&|o| o.pool = Some("gpu boxes".into())),
                &fleet,
                Err("\"gpu boxes\" is not a pool name"),
            ),
            (
                "a pool nobody serves",
                with(&|o| o.pool = Some("gpu".into())),
                &fleet,
                Err("no worker serves the pool \"gpu\" (pools served now: default, review)"),
            ),
            (
                "no worker at all",
                with(&|o| o.pool = Some("gpu".into())),
                &nobody,
                Err("no worker serves the pool \"gpu\" (no worker answered at all)"),
            ),
            (
                "a runtime nobody offers in the (own) pool",
                with(&|o| o.runtime = Some(OrchestratorRuntime::Codex)),
                &fleet,
                Err(
                    "no worker of the pool \"default\" offers the runtime \"codex\" (runtimes offered there: native)",
                ),
            ),
            (
                "parallel is not available yet",
                with(&|o| o.strategy = Some(SummonStrategy::Parallel)),
                &fleet,
                Err("the strategy \"parallel\" is not available yet: only solo."),
            ),
            (
                "consensus is not available yet",
                with(&|o| o.strategy = Some(SummonStrategy::Consensus)),
                &fleet,
                Err("the strategy \"consensus\" is not available yet: only solo."),
            ),
            (
                "sequential is not available yet",
                with(&|o| o.strategy = Some(SummonStrategy::Sequential)),
                &fleet,
                Err("the strategy \"sequential\" is not available yet: only solo."),
            ),
            (
                "an empty brief, whatever else it says",
                {
                    let mut o = summons("  ");
                    o.pool = Some("review".into());
                    o
                },
                &fleet,
                Err("a summons needs a brief, and the message was empty."),
            ),
        ];
        for (name, output, fleet, want) in cases {
            let got = summons_target(&output, "default", None, fleet);
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "{name}"),
                (Err(want), Err(got)) => {
                    assert!(got.starts_with(want), "{name}: {got}");
                }
                (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn an_emergency_takes_the_urgent_lane_only_where_a_worker_serves_it() {
        let mut older = offer("default", "native");
        older.urgent = false;
        let serving = FleetView::Seen(vec![offer("default", "native")]);
        let not_serving = FleetView::Seen(vec![older]);
        let mut urgent = summons("Production is down: roll back the deploy.");
        urgent.emergency = Some(true);
        let cases = [
            ("a worker serves the lane", &urgent, &serving, Lane::Urgent),
            (
                "only workers that do not say they serve it",
                &urgent,
                &not_serving,
                Lane::UrgentUnserved,
            ),
            (
                "the fleet could not be asked",
                &urgent,
                &FleetView::Unknown,
                Lane::UrgentUnserved,
            ),
            (
                "no emergency",
                &summons("Tidy the docs."),
                &serving,
                Lane::Queued,
            ),
        ];
        for (name, output, fleet, want) in cases {
            let got = summons_target(output, "default", None, fleet).unwrap();
            assert_eq!(got.lane, want, "{name}");
            assert!(!got.directed, "{name}: an emergency alone directs nothing");
        }
        assert!(FleetView::wanted(&urgent), "an emergency asks the fleet");
    }

    #[test]
    fn the_coordinators_runtime_is_the_default_and_a_named_one_wins() {
        let fleet = FleetView::Seen(vec![
            offer("default", "claude-code"),
            offer("default", "native"),
        ]);
        let plain = summons("Go.");
        let got = summons_target(&plain, "default", Some("claude-code"), &FleetView::NotAsked);
        assert_eq!(got.unwrap().runtime.as_deref(), Some("claude-code"));
        let mut named = summons("Go.");
        named.runtime = Some(OrchestratorRuntime::Native);
        let got = summons_target(&named, "default", Some("claude-code"), &fleet);
        assert_eq!(got.unwrap().runtime.as_deref(), Some("native"));
    }

    #[test]
    fn the_direction_note_keeps_the_humans_words_verbatim() {
        let d = Directive {
            words: "get Codex to review, \"quickly\"".into(),
            parsed: Some("runtime codex".into()),
            confidence: Some(90),
        };
        assert_eq!(
            direction_note(2, "review", Some("codex"), Some(&d)),
            "Orchestrator II is summoned to the pool \"review\" on the runtime \"codex\". \
             The human's directive, verbatim: \"get Codex to review, \\\"quickly\\\"\" \
             (read as: runtime codex; confidence 90 %)."
        );
    }
}
