//! The router: a `match` on the Arbiter's intent. Each decision becomes log
//! entries and effects (summons, inputs, releases) of the current step; they
//! are published once the step is stored.

use arbiter_protocol::{
    ArbiterEntry, ArbiterIntent, ArbiterOutput, ArbiterToOrchestratorEntry, Control, ControlAction,
    ErrorEntry, LogBody, MusingEntry, OrchestratorInput, ReleasedEntry, Summon, SummonedEntry,
    SystemEntry, VERSION, WireError,
};
use chrono::Utc;

use crate::session::{Input, Session};
use crate::state::{Active, Effect, Pending};

impl Session {
    /// Carries out one Arbiter decision.
    pub(crate) fn route(&mut self, output: ArbiterOutput) {
        let ArbiterOutput {
            intent,
            message,
            memory,
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
            ArbiterIntent::SummonOrchestrator if message.trim().is_empty() => self.reject(
                intent,
                "a summons needs a brief, and the message was empty.",
            ),
            ArbiterIntent::SummonOrchestrator => {
                self.state.rejections = 0;
                self.release_active();
                self.summon(message);
            }
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

    fn summon(&mut self, brief: String) {
        self.state.summoned += 1;
        self.new_exchange();
        let number = self.state.summoned;
        let orch_id = uuid::Uuid::now_v7().to_string();
        let pool = self.shared.config.pool.clone();
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
        tracing::info!(orch.id = %orch_id, number, pool = %pool, "summoning an Orchestrator");
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
            runtime: self.shared.config.orchestrator_runtime.clone(),
            handoff,
            budget: None,
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
