//! The router: a `match` on the Arbiter's intent. Each decision becomes log
//! entries and effects (summons, inputs, releases) of the current step; they
//! are published once the step is stored.

use arbiter_protocol::{
    ArbiterEntry, ArbiterIntent, ArbiterOutput, ArbiterToOrchestratorEntry, Control, ControlAction,
    Directive, ErrorEntry, LogBody, MusingEntry, NotificationKind, OrchestratorInput, Policy,
    ReleasedEntry, StrategyEntry, Summon, SummonStrategy, SummonedEntry, SystemEntry, VERSION,
    WireError, member_name, orchestrator_name,
};

use crate::rules::summons::{FleetView, Lane, Target, summons_target};
use crate::rules::team::pick_members;
use crate::rules::{Core, Task};
use crate::state::{Active, Effect, Pending};

/// What became of an Arbiter decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routed {
    Carried,
    /// Sent back to the Arbiter (or, past the retries, given up on).
    Rejected,
}

impl Core {
    /// Carries out one Arbiter decision; `fleet` is what the workers offered
    /// when the decision is a directed summons (`FleetView::wanted`).
    /// Whether it was carried out or sent back.
    pub(crate) fn route(&mut self, output: ArbiterOutput, fleet: &FleetView) -> Routed {
        let target = (output.intent == ArbiterIntent::SummonOrchestrator).then(|| {
            summons_target(
                &output,
                &self.config.pool,
                self.config.orchestrator_runtime.as_deref(),
                fleet,
                self.config.team_cap,
                self.config.escalate_risk,
            )
        });
        // A team started at once must fit the session's budget as a whole.
        let target = target.map(|target| {
            target.and_then(|t| {
                let at_once = if t.strategy == SummonStrategy::Sequential {
                    1
                } else {
                    t.briefs.len()
                };
                self.team_budget(at_once).map(|()| t)
            })
        });
        // A summons that chose anything (a strategy, a team, a pool, a
        // runtime, on the human's words) leaves a strategy entry.
        let chose = output.strategy.is_some()
            || output.count.is_some()
            || output.briefs.is_some()
            || output.pool.is_some()
            || output.runtime.is_some()
            || output.directive.is_some()
            || output.risk.is_some()
            || output.complexity.is_some()
            || output.consensus.is_some();
        let ArbiterOutput {
            intent,
            message,
            memory,
            directive,
            members,
            strategy,
            pool,
            runtime,
            risk,
            complexity,
            policy,
            ..
        } = output;
        self.remember_facts(memory.unwrap_or_default());
        match intent {
            ArbiterIntent::AddressHuman => {
                self.state.rejections = 0;
                // With no Orchestrator left (one failed, or all were
                // released), these are the closing words.
                let text = if self.state.team.is_empty() {
                    self.closing(message)
                } else {
                    message
                };
                self.log(LogBody::Arbiter(ArbiterEntry { text }));
                self.ask_watchers();
            }
            ArbiterIntent::AddressOrchestrator => {
                match pick_members(&self.state.team, members.as_deref(), false) {
                    Ok(picked) => {
                        self.state.rejections = 0;
                        for active in picked {
                            self.send_to_orchestrator(active, message.clone());
                        }
                    }
                    Err(reason) => return self.reject(intent, &reason),
                }
            }
            ArbiterIntent::SummonOrchestrator => match target {
                Some(Ok(mut target)) => {
                    let policy = match policy.as_deref().map(Policy::parse).transpose() {
                        Ok(policy) => policy,
                        Err(e) => return self.reject(intent, &format!("its {e}")),
                    };
                    self.state.approvals.summons_policy = policy;
                    self.state.rejections = 0;
                    self.release(self.state.team.clone());
                    let brief = self.brief(message);
                    if target.strategy == SummonStrategy::Solo
                        && let [only] = target.briefs.as_mut_slice()
                    {
                        only.clone_from(&brief);
                    }
                    self.summon(brief, target, directive, chose, (risk, complexity));
                }
                Some(Err(reason)) => {
                    // The audit trail: what was asked, and why it did not go.
                    if chose {
                        self.log(LogBody::Strategy(StrategyEntry {
                            number: None,
                            strategy: strategy.unwrap_or_default(),
                            members: 0,
                            pool: pool.unwrap_or_else(|| self.config.pool.clone()),
                            runtime: runtime.map(|r| r.as_str().to_owned()),
                            directive,
                            rejected: Some(reason.clone()),
                            risk,
                            complexity,
                            escalation: None,
                        }));
                    }
                    return self.reject(intent, &reason);
                }
                None => unreachable!("a summons always has a target decision"),
            },
            ArbiterIntent::ReleaseOrchestrators => {
                match pick_members(&self.state.team, members.as_deref(), true) {
                    Ok(picked) => {
                        self.state.rejections = 0;
                        self.release(picked);
                        let text = self.closing(message);
                        if !text.trim().is_empty() {
                            self.log(LogBody::Arbiter(ArbiterEntry { text }));
                        }
                    }
                    Err(reason) => return self.reject(intent, &reason),
                }
            }
            ArbiterIntent::Musings => {
                self.state.rejections = 0;
                self.log(LogBody::Musing(MusingEntry { text: message }));
            }
        }
        Routed::Carried
    }

    /// An intent that cannot be carried out goes back to the Arbiter as a
    /// system note, a bounded number of times in a row.
    fn reject(&mut self, intent: ArbiterIntent, reason: &str) -> Routed {
        self.state.rejections += 1;
        if self.state.rejections > self.config.intent_retries {
            self.state.rejections = 0;
            let error = WireError::IntentRejected {
                intent,
                reason: reason.to_owned(),
            };
            let summary = format!("The Arbiter's turn could not be routed: {error}");
            self.log(LogBody::Error(ErrorEntry { error }));
            self.notify(NotificationKind::Failed, summary);
            return Routed::Rejected;
        }
        let text = format!(
            "Your {} could not be carried out: {reason}",
            intent.as_str()
        );
        self.log(LogBody::System(SystemEntry { text: text.clone() }));
        self.enqueue(Pending::System { text });
        Routed::Rejected
    }

    fn send_to_orchestrator(&mut self, active: Active, text: String) {
        self.note_to_orchestrator(&text);
        let seq = active.inputs_sent + 1;
        if let Some(a) = self.state.member_mut(&active.orch_id) {
            a.inputs_sent = seq;
            a.asked = false;
            a.reminded = false;
        }
        let budget = self.allowance(&active.orch_id);
        if !active.session_inputs {
            // A worker that has not said it reads the log (an older one,
            // another language's, or one that has not output yet) also gets
            // it on `orch.<id>.in`.
            self.effect(Effect::Input(OrchestratorInput {
                v: VERSION,
                session_id: self.id.clone(),
                orch_id: active.orch_id.clone(),
                seq,
                message: text.clone(),
                sent_at: self.now.wall,
                budget,
            }));
        }
        // The entry is the input (protocol v3): stored once, on the
        // Orchestrator's own input subject (see `state::entry_subject`).
        self.log(LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
            number: active.number,
            member: active.member,
            orch_id: active.orch_id,
            text,
            input_seq: Some(seq),
            budget,
        }));
    }

    /// The Arbiter's words at the end of the work: under the `small`
    /// profile, followed by the last report it had and the worker's
    /// evidence, as written (once: it is then cleared). A small model's
    /// own closing words are often "release all" or a server's error.
    fn closing(&mut self, message: String) -> String {
        if self.config.model.profile != arbiter_llm::Profile::Small {
            return message;
        }
        match self.state.last_report.take() {
            Some(report) if message.trim().is_empty() => format!("The last report: {report}"),
            Some(report) if !message.contains(report.as_str()) => {
                format!("{message}\n\nThe last report: {report}")
            }
            _ => message,
        }
    }

    /// The brief a summons sends: the Arbiter's message; under the `small`
    /// profile with the human's last words after it, as written (a small
    /// model's restatement drops what matters: a file name, a command).
    fn brief(&self, message: String) -> String {
        match (&self.config.model.profile, &self.state.last_human) {
            (arbiter_llm::Profile::Small, Some(words)) if !message.contains(words.as_str()) => {
                format!("{message}\n\nThe human's words, as written: {words}")
            }
            _ => message,
        }
    }

    /// Summons one Orchestrator (solo) or a whole team at once: a team is
    /// one generation number, its members 1, 2, 3… (II.1, II.2, II.3).
    fn summon(
        &mut self,
        brief: String,
        target: Target,
        directive: Option<Directive>,
        chose: bool,
        (risk, complexity): (Option<u8>, Option<u8>),
    ) {
        self.state.summoned += 1;
        self.new_exchange();
        let number = self.state.summoned;
        let Target {
            pool,
            runtime,
            needs,
            directed,
            lane,
            strategy,
            briefs,
            escalation,
        } = target;
        let team = strategy != SummonStrategy::Solo;
        let size = u32::try_from(briefs.len()).unwrap_or(u32::MAX);
        if chose {
            self.log(LogBody::Strategy(StrategyEntry {
                number: Some(number),
                strategy,
                members: size,
                pool: pool.clone(),
                runtime: runtime.clone(),
                directive: directive.clone(),
                rejected: None,
                risk,
                complexity,
                escalation,
            }));
        }
        if directed || directive.is_some() {
            // The record of where it went and on whose words.
            let text = direction_note(
                number,
                &pool,
                runtime.as_deref(),
                &needs,
                directive.as_ref(),
            );
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
        // The predecessor's packet goes as it was written, not through the Arbiter.
        let handoff = self.state.handoff.take();
        // Every member of this summons starts from a rewind; a chain's later
        // links from the link before.
        let start_from = self.state.rewind.take();
        let sequential = strategy == SummonStrategy::Sequential;
        let consensus = strategy == SummonStrategy::Consensus;
        let mut briefs = briefs;
        if team {
            self.gather(number, size);
        }
        if consensus && let Some(gather) = self.state.gather.as_mut() {
            gather.consensus = true;
        }
        if sequential && let Some(gather) = self.state.gather.as_mut() {
            // Only the first link now; the others when the one before reports.
            gather.sequential = true;
            gather.links = briefs.drain(1..).collect();
            gather.purpose = brief.clone();
            gather.pool = pool.clone();
            gather.runtime = runtime.clone();
            gather.needs = needs.clone();
        }
        let mut first = None;
        for (i, member_brief) in briefs.into_iter().enumerate() {
            let member = team.then(|| u32::try_from(i + 1).unwrap_or(u32::MAX));
            // A member of a team told of its team; its own brief follows.
            let member_brief = match member {
                Some(m) if consensus => {
                    crate::rules::consensus::member_brief(number, m, size, &member_brief)
                }
                Some(1) if sequential => {
                    crate::rules::team::chain_brief(number, 1, size, &brief, &member_brief)
                }
                Some(m) if member_brief != brief => format!(
                    "You are {} of a team of {size} working at once, each in a \
                     workspace of its own. The team's purpose: {brief}\n\nYour part:\n{member_brief}",
                    member_name(number, Some(m))
                ),
                _ => member_brief,
            };
            let orch_id = self.start_member(
                number,
                member,
                !sequential,
                member_brief,
                &pool,
                runtime.clone(),
                needs.clone(),
                handoff.clone(),
                start_from.clone(),
                lane == Lane::Urgent,
            );
            first.get_or_insert(orch_id);
        }
        tracing::info!(number, size, pool = %pool, runtime = ?runtime, directed, strategy = strategy.as_str(), ?lane, "summoned");
        // A summons nobody can take is worth a word: asked once the step is
        // stored, off the session's path (the answer comes back as an input).
        // Not for a summons held at the budget cap: it is asked when the
        // summons goes out.
        if let Some(orch_id) = first
            && self
                .step
                .effects
                .iter()
                .any(|e| matches!(e, Effect::Summon(s) if s.orch_id == orch_id))
        {
            self.step.tasks.push(Task::CheckPool { orch_id, pool });
        }
    }

    /// Starts one Orchestrator of generation `number` (member `member` of
    /// a team): it becomes live, is logged, and its summons goes out. A
    /// parallel member has a workspace of its own (`own_workspace`: the
    /// summons carries its member number); a chain's links share the
    /// session's. Returns its orch_id.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_member(
        &mut self,
        number: u32,
        member: Option<u32>,
        own_workspace: bool,
        brief: String,
        pool: &str,
        runtime: Option<String>,
        needs: Vec<String>,
        handoff: Option<arbiter_protocol::PriorHandoff>,
        start_from: Option<String>,
        emergency: bool,
    ) -> String {
        let orch_id = uuid::Uuid::now_v7().to_string();
        self.state.team.push(Active {
            orch_id: orch_id.clone(),
            number,
            member,
            reported: false,
            inputs_sent: 0,
            outputs_seen: 0,
            session_inputs: false,
            asked: false,
            reminded: false,
        });
        self.log(LogBody::Summoned(SummonedEntry {
            number,
            member,
            orch_id: orch_id.clone(),
            pool: pool.to_owned(),
            brief: brief.clone(),
        }));
        tracing::info!(orch.id = %orch_id, number, member, pool = %pool, emergency, "summoning an Orchestrator");
        // Sent now, or once the budget allows (`budget.rs`).
        self.send_summons(Summon {
            v: VERSION,
            session_id: self.id.clone(),
            orch_id: orch_id.clone(),
            number,
            member: member.filter(|_| own_workspace),
            brief,
            workspace: None,
            pool: pool.to_owned(),
            summoned_at: self.now.wall,
            runtime,
            needs,
            handoff,
            budget: None,
            emergency,
            policy: self.state.approvals.policy.clone(),
            arbiter_policy: self.state.approvals.summons_policy.clone(),
            start_from,
            link: member.filter(|_| !own_workspace),
        });
        orch_id
    }

    /// Releases live Orchestrators: tells each one's worker and logs it.
    pub(crate) fn release(&mut self, members: Vec<Active>) {
        for active in members {
            self.state.team.retain(|a| a.orch_id != active.orch_id);
            self.withdraw_approvals(&active.orch_id);
            self.effect(Effect::Control(Control {
                v: VERSION,
                orch_id: active.orch_id.clone(),
                action: ControlAction::Release,
                sent_at: self.now.wall,
            }));
            if !self.state.team.iter().any(|a| a.number == active.number) {
                self.state.notes.retain(|(n, _)| *n != active.number);
            }
            self.log(LogBody::Released(ReleasedEntry {
                numbers: vec![active.number],
                member: active.member,
            }));
            self.state.released = true;
        }
        // A team released before all reported: what came in goes on now.
        if let Some(number) = self.state.gather.as_ref().map(|g| g.number)
            && !self.state.team.iter().any(|a| a.number == number)
        {
            self.deliver_gather(None);
        }
    }
}

/// The log's note on a directed summons: where it goes, and the human's
/// words behind it, verbatim.
fn direction_note(
    number: u32,
    pool: &str,
    runtime: Option<&str>,
    needs: &[String],
    directive: Option<&Directive>,
) -> String {
    let name = orchestrator_name(number);
    let mut text = format!(
        "{name} is summoned to the pool {pool:?} on the runtime {:?}",
        runtime.unwrap_or("any")
    );
    if !needs.is_empty() {
        text.push_str(&format!(", needing the MCP servers {}", needs.join(", ")));
    }
    text.push('.');
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

    #[test]
    fn the_direction_note_keeps_the_humans_words_verbatim() {
        let d = Directive {
            words: "get Codex to review, \"quickly\"".into(),
            parsed: Some("runtime codex".into()),
            confidence: Some(90),
        };
        assert_eq!(
            direction_note(2, "review", Some("codex"), &[], Some(&d)),
            "Orchestrator II is summoned to the pool \"review\" on the runtime \"codex\". \
             The human's directive, verbatim: \"get Codex to review, \\\"quickly\\\"\" \
             (read as: runtime codex; confidence 90 %)."
        );
        assert_eq!(
            direction_note(3, "default", None, &["git".into(), "github".into()], None),
            "Orchestrator III is summoned to the pool \"default\" on the runtime \"any\", \
             needing the MCP servers git, github."
        );
    }
}
