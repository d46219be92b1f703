//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::*;

/// What decodes as `T` encodes, decodes again to an equal value, and
/// encodes to the same JSON (the round trip of `tests/tests/roundtrip.rs`);
/// its text decodes too. `true`: it decoded.
pub fn round<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) -> bool {
    let Ok(decoded) = serde_json::from_slice::<T>(data) else {
        return false;
    };
    let encoded = match serde_json::to_value(&decoded) {
        Ok(encoded) => encoded,
        Err(e) => panic!("{decoded:?} does not encode: {e}"),
    };
    let again: T = match serde_json::from_value(encoded.clone()) {
        Ok(again) => again,
        Err(e) => panic!("what it encoded does not decode: {e}\n{encoded}"),
    };
    assert_eq!(again, decoded, "decode ∘ encode changed the value");
    let twice = serde_json::to_value(&again).ok();
    assert_eq!(twice.as_ref(), Some(&encoded), "encoding is not stable");
    let text = serde_json::to_string(&decoded).unwrap_or_default();
    if let Err(e) = serde_json::from_str::<T>(&text) {
        panic!("its text does not decode: {e}\n{text}");
    }
    true
}

/// The wire types, in the order the first byte picks them.
const TYPES: usize = 32;

/// `protocol_messages`: the first byte picks a wire type (modulo
/// [`TYPES`]), the rest is its JSON. A type that is not a JSON message
/// takes the rest as text: the policy, budget and memory parsers.
pub fn protocol_messages(data: &[u8]) {
    if let Some((&pick, rest)) = data.split_first() {
        message(pick, rest);
    }
}

/// [`protocol_messages`] of one input; `true`: it decoded as its type.
fn message(pick: u8, rest: &[u8]) -> bool {
    match usize::from(pick) % TYPES {
        0 => round::<Evidence>(rest),
        1 => round::<Handoff>(rest),
        2 => round::<Spend>(rest),
        3 => round::<LogEntry>(rest),
        4 => round::<Summon>(rest),
        5 => round::<OrchestratorInput>(rest),
        6 => round::<OrchestratorMessage>(rest),
        7 => round::<OrchestratorStatus>(rest),
        8 => round::<Control>(rest),
        9 => round::<HumanMessage>(rest),
        10 => round::<ArbiterDelta>(rest),
        11 => round::<SessionStatus>(rest),
        12 => round::<ArbiterOutput>(rest),
        13 => round::<OrchestratorOutput>(rest),
        14 => round::<ApprovalRequest>(rest),
        15 => round::<ApprovalReply>(rest),
        16 => round::<ApprovalAskedEntry>(rest),
        17 => round::<ApprovalAnsweredEntry>(rest),
        18 => round::<WaitingApproval>(rest),
        19 => round::<Notification>(rest),
        20 => round::<MemoryEntry>(rest),
        21 => round::<BudgetChange>(rest),
        22 => round::<Budget>(rest),
        23 => round::<Policy>(rest),
        24 => round::<Layers>(rest),
        25 => round::<PriorHandoff>(rest),
        26 => round::<ArbiterPacket>(rest),
        27 => round::<OrchestratorEvent>(rest),
        28 => round::<WireError>(rest),
        29 => round::<SessionSpend>(rest),
        30 => round::<Value>(rest),
        _ => {
            text_inputs(&String::from_utf8_lossy(rest));
            true
        }
    }
}

/// What a human types and the protocol's parsers read: a policy, a
/// `/budget` line, an amount, a memory's text.
fn text_inputs(text: &str) {
    if let Ok(policy) = Policy::parse(text) {
        // A parsed policy travels as JSON: it must come back the same.
        let json = serde_json::to_vec(&policy).unwrap_or_default();
        assert!(round::<Policy>(&json), "a parsed policy does not decode");
        let _ = policy.within(&Policy::default());
        let _ = policy.can_ask();
        for tool in ["bash", "read", "write", "edit", "mcp__git__git_status"] {
            let _ = policy.decide(tool, &serde_json::json!({"command": text, "path": text}));
        }
    }
    let _ = budget::parse_command(text);
    let _ = budget::parse_limit(text);
    if let Some(cents) = budget::parse_usd(text) {
        let _ = budget::thousands(cents);
    }
    let _ = memory::check_text(text);
    let _ = memory::secret_in(text);
    let _ = memory::is_valid_workspace(text);
    let _ = NotificationKind::parse(text);
    let _ = subjects::is_valid_token(text);
}

/// `handoff_packet`: the first byte picks an Orchestrator's packet, a
/// predecessor's packet as a summons carries it, or an Arbiter's packet;
/// the rest is its JSON. What decodes round-trips; its checks do not
/// panic; what a successor reads of it holds the packet exactly as written.
pub fn handoff_packet(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => {
            if !round::<Handoff>(rest) {
                return;
            }
            let Ok(packet) = serde_json::from_slice::<Handoff>(rest) else {
                return;
            };
            let _ = packet.check();
            let line = packet.compact_line(2);
            assert!(!line.contains('\n') || packet.open.iter().any(|o| o.id.contains('\n')));
            successor_reads(&PriorHandoff {
                number: 2,
                orch_id: "orch-fuzz".to_owned(),
                packet,
            });
        }
        1 => {
            if !round::<PriorHandoff>(rest) {
                return;
            }
            if let Ok(prior) = serde_json::from_slice::<PriorHandoff>(rest) {
                let _ = prior.packet.check();
                successor_reads(&prior);
            }
        }
        _ => {
            if !round::<ArbiterPacket>(rest) {
                return;
            }
            let Ok(packet) = serde_json::from_slice::<ArbiterPacket>(rest) else {
                return;
            };
            let _ = packet.check();
            let read = packet.for_successor(3);
            let verbatim = packet.verbatim();
            assert!(
                read.ends_with(&verbatim),
                "the packet is not read as written"
            );
            let back: Result<ArbiterPacket, _> = serde_json::from_str(&verbatim);
            assert_eq!(
                back.ok(),
                Some(packet),
                "the verbatim packet reads back otherwise"
            );
        }
    }
}

/// The successor's first message ends with the packet's JSON as written,
/// which reads back as the same packet.
fn successor_reads(prior: &PriorHandoff) {
    let read = prior.for_successor();
    let verbatim = prior.packet.verbatim();
    assert!(
        read.ends_with(&verbatim),
        "the packet is not read as written"
    );
    let back: Result<Handoff, _> = serde_json::from_str(&verbatim);
    assert_eq!(
        back.as_ref().ok(),
        Some(&prior.packet),
        "the verbatim packet reads back otherwise"
    );
    let _ = prior.packet.counts();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in seed corpus (`fuzz/corpus/`), compiled in: this
    /// crate does no I/O, tests too (docs/architecture.md). A new seed, a
    /// regression one too, is added here.
    const SEEDS: &[(&str, &str, &[u8])] = &[
        (
            "protocol_messages",
            "arbiter-delta.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/arbiter-delta.json"),
        ),
        (
            "protocol_messages",
            "arbiter-output.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/arbiter-output.json"),
        ),
        (
            "protocol_messages",
            "budget-command.txt",
            include_bytes!("../../fuzz/corpus/protocol_messages/budget-command.txt"),
        ),
        (
            "protocol_messages",
            "control.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/control.json"),
        ),
        (
            "protocol_messages",
            "evidence.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/evidence.json"),
        ),
        (
            "protocol_messages",
            "handoff.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/handoff.json"),
        ),
        (
            "protocol_messages",
            "human-message.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/human-message.json"),
        ),
        (
            "protocol_messages",
            "log-entry-input.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/log-entry-input.json"),
        ),
        (
            "protocol_messages",
            "log-entry-orchestrator.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/log-entry-orchestrator.json"),
        ),
        (
            "protocol_messages",
            "notification.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/notification.json"),
        ),
        (
            "protocol_messages",
            "orchestrator-input.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/orchestrator-input.json"),
        ),
        (
            "protocol_messages",
            "orchestrator-message.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/orchestrator-message.json"),
        ),
        (
            "protocol_messages",
            "orchestrator-output.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/orchestrator-output.json"),
        ),
        (
            "protocol_messages",
            "orchestrator-status.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/orchestrator-status.json"),
        ),
        (
            "protocol_messages",
            "policy.txt",
            include_bytes!("../../fuzz/corpus/protocol_messages/policy.txt"),
        ),
        (
            "protocol_messages",
            "session-status.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/session-status.json"),
        ),
        (
            "protocol_messages",
            "spend.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/spend.json"),
        ),
        (
            "protocol_messages",
            "summon.json",
            include_bytes!("../../fuzz/corpus/protocol_messages/summon.json"),
        ),
        (
            "handoff_packet",
            "arbiter-packet.json",
            include_bytes!("../../fuzz/corpus/handoff_packet/arbiter-packet.json"),
        ),
        (
            "handoff_packet",
            "orchestrator-packet.json",
            include_bytes!("../../fuzz/corpus/handoff_packet/orchestrator-packet.json"),
        ),
        (
            "handoff_packet",
            "prior-handoff.json",
            include_bytes!("../../fuzz/corpus/handoff_packet/prior-handoff.json"),
        ),
    ];

    fn seeds(target: &str) -> impl Iterator<Item = (&'static str, &'static [u8])> {
        SEEDS
            .iter()
            .filter(move |(t, _, _)| *t == target)
            .map(|(_, name, data)| (*name, *data))
    }

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        for target in ["protocol_messages", "handoff_packet"] {
            assert!(seeds(target).count() >= 3, "{target}: too few seeds");
            for (name, data) in seeds(target) {
                let replayed = std::panic::catch_unwind(|| {
                    protocol_messages(data);
                    handoff_packet(data);
                });
                assert!(replayed.is_ok(), "{target}/{name} panicked");
            }
        }
    }

    #[test]
    fn every_wire_seed_decodes_as_its_type() {
        for (name, data) in seeds("protocol_messages") {
            if let Some((&pick, rest)) = data.split_first()
                && !name.starts_with("regression-")
            {
                assert!(message(pick, rest), "{name} does not decode as its type");
            }
        }
    }
}
