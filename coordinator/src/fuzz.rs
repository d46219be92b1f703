//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use std::sync::OnceLock;

use arbiter_bus::seal::Sealer;
use arbiter_llm::structured;
use arbiter_protocol::{ArbiterOutput, ArbiterPacket, OrchestratorOutput};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rules::form::{Offer, arbiter_schema};
use crate::state::{Record, StepRecord};

/// `protocol_records` (the coordinator's part): a session's step record
/// as `state::restore` reads it from the log, in the clear
/// (`arbiter_bus::decode`) and sealed (sealed with a key, opened with it,
/// then decoded). What decodes round-trips, and is what the writer's
/// borrowed form of it (`StepRecord`) writes.
pub fn session_records(data: &[u8]) {
    let subject = arbiter_protocol::subjects::session_log("fuzz");
    let sealer = sealer();
    let sealed = sealer.seal("fuzz", data);
    match sealer.open("fuzz", &sealed) {
        Ok(plain) => assert_eq!(plain, data, "a sealed record opens otherwise"),
        Err(e) => panic!("a record just sealed does not open: {e}"),
    }
    assert!(
        sealer.open("another", &sealed).is_err(),
        "a record opens for another session"
    );
    let _ = sealer.open("fuzz", &String::from_utf8_lossy(data));
    let Ok(record) = arbiter_bus::decode::<Record>(&subject, data) else {
        return;
    };
    let encoded = serde_json::to_value(&record).unwrap_or_default();
    let again = serde_json::from_value::<Record>(encoded.clone());
    assert_eq!(
        again.as_ref().ok(),
        Some(&record),
        "a step record reads back otherwise: {encoded}"
    );
    let written = serde_json::to_value(StepRecord {
        v: record.v,
        session_id: &record.session_id,
        rev: record.rev,
        append: &record.append,
        replace: record.replace,
        snapshot: &record.snapshot,
        outbox: &record.outbox,
    })
    .unwrap_or_default();
    assert_eq!(written, encoded, "the writer's form of a record differs");
}

fn sealer() -> &'static Sealer {
    static SEALER: OnceLock<Sealer> = OnceLock::new();
    SEALER.get_or_init(|| Sealer::new(&[7; 32]))
}

/// The schemas a model's final reply is parsed against.
struct Schemas {
    orchestrator: Value,
    arbiter_full: Value,
    arbiter_small: Value,
    packet: Value,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| Schemas {
        // The worker's (`Shared::output_schema`).
        orchestrator: arbiter_llm::schema::for_model::<OrchestratorOutput>(),
        // The coordinator's, with everything offered and with a small
        // model's offer (`rules::form::Offer::of`).
        arbiter_full: arbiter_schema(&Offer {
            teams: true,
            judgement: true,
            policy: true,
            memory: true,
            needs: true,
            pools: Some(vec!["default".to_owned(), "review".to_owned()]),
            runtimes: None,
        }),
        arbiter_small: arbiter_schema(&Offer {
            teams: false,
            judgement: false,
            policy: false,
            memory: false,
            needs: false,
            pools: None,
            runtimes: Some(vec!["native".to_owned()]),
        }),
        // The Arbiter's handoff (`rules::arbiter_handoff`).
        packet: arbiter_llm::schema::for_model::<ArbiterPacket>(),
    })
}

/// `structured_output`: a model's final reply, parsed as the worker and
/// the coordinator parse it (`arbiter_llm::structured::parse_with`
/// against the schema the model was given); the first byte picks the
/// reply: an Orchestrator's output, the Arbiter's turn (two offers), the
/// Arbiter's handoff packet. What must hold: what parses, written back as
/// JSON, parses again to the same value; the packet's own checks do not
/// panic.
pub fn structured_output(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let s = schemas();
    match pick % 4 {
        0 => {
            if let Some(output) = parses_again::<OrchestratorOutput>(&text, &s.orchestrator)
                && let Some(handoff) = &output.handoff
            {
                let _ = handoff.check();
            }
        }
        1 => drop(parses_again::<ArbiterOutput>(&text, &s.arbiter_full)),
        2 => drop(parses_again::<ArbiterOutput>(&text, &s.arbiter_small)),
        _ => {
            if let Some(packet) = parses_again::<ArbiterPacket>(&text, &s.packet) {
                let _ = packet.check();
            }
        }
    }
    let _ = structured::json_in(&text);
}

/// `text` parsed against `schema`; what parses is written as JSON and
/// parsed again, to the same value.
fn parses_again<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    text: &str,
    schema: &Value,
) -> Option<T> {
    let parsed = structured::parse_with::<T>(text, schema).ok()?;
    let written = serde_json::to_string(&parsed).unwrap_or_default();
    match structured::parse_with::<T>(&written, schema) {
        Ok(again) => assert_eq!(
            again, parsed,
            "a reply written back parses otherwise: {written}"
        ),
        Err(e) => panic!("a reply that parsed, written back, does not parse: {e}\n{written}"),
    }
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target);
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, std::fs::read(e.path()).ok()?))
            })
            .collect();
        out.sort();
        out
    }

    /// The seed `name` of `target` is `data`, its JSON compared as JSON
    /// after the first byte. With `ARBITER_WRITE_SEEDS` set it is written
    /// instead (fuzz/seeds.py writes the other seeds).
    fn seed_is(target: &str, name: &str, data: &[u8]) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target)
            .join(name);
        if std::env::var_os("ARBITER_WRITE_SEEDS").is_some() {
            assert!(std::fs::write(&path, data).is_ok(), "{}", path.display());
            return;
        }
        let json = |d: &[u8]| serde_json::from_slice::<serde_json::Value>(d.get(1..)?).ok();
        let seed = std::fs::read(&path).unwrap_or_default();
        assert!(
            seed.first() == data.first() && json(&seed).is_some() && json(&seed) == json(data),
            "{} is not the record written today: write the seeds again \
             (ARBITER_WRITE_SEEDS=1, see this test's comment)",
            path.display()
        );
    }

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        for target in ["protocol_records", "structured_output"] {
            let seeds = seeds(target);
            assert!(seeds.len() >= 3, "{target}: {} seeds", seeds.len());
            for (name, data) in seeds {
                let replayed = std::panic::catch_unwind(|| {
                    session_records(data.get(1..).unwrap_or_default());
                    structured_output(&data);
                });
                assert!(replayed.is_ok(), "{target}/{name} panicked");
            }
        }
    }

    /// The recorded replies parse (the property starts from whole ones).
    #[test]
    fn the_recorded_replies_parse() {
        let s = schemas();
        for (name, data) in seeds("structured_output") {
            let Some((&pick, rest)) = data.split_first() else {
                continue;
            };
            if name.starts_with("regression-") {
                continue;
            }
            let text = String::from_utf8_lossy(rest);
            let parsed = match pick % 4 {
                0 => structured::parse_with::<OrchestratorOutput>(&text, &s.orchestrator).map(drop),
                1 => structured::parse_with::<ArbiterOutput>(&text, &s.arbiter_full).map(drop),
                2 => structured::parse_with::<ArbiterOutput>(&text, &s.arbiter_small).map(drop),
                _ => structured::parse_with::<ArbiterPacket>(&text, &s.packet).map(drop),
            };
            assert!(parsed.is_ok(), "{name}: {parsed:?}");
        }
    }
    /// The coordinator's seed of `protocol_records` is a session's step
    /// record as the coordinator writes it today, from the examples of
    /// docs/protocol.md (its summons and log entry as effects): a change of
    /// the record fails here until the seed is written again, with
    /// `ARBITER_WRITE_SEEDS=1 cargo test -p arbiter-coordinator --lib
    /// the_record_seeds`.
    #[test]
    fn the_record_seeds_are_what_is_written_today() {
        use crate::state::{Effect, Snapshot, Turn, TurnRole};
        let examples = seeds("protocol_messages");
        let example = |name: &str| -> Option<Vec<u8>> {
            examples
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, d)| d[1..].to_vec())
        };
        let summon = example("summon.json").and_then(|d| serde_json::from_slice(&d).ok());
        let entry =
            example("log-entry-orchestrator.json").and_then(|d| serde_json::from_slice(&d).ok());
        let (Some(summon), Some(entry)) = (summon, entry) else {
            panic!("the docs' examples are not in the corpus");
        };
        let at = chrono::DateTime::parse_from_rfc3339("2025-06-30T14:02:11Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_default();
        let record = Record {
            v: arbiter_protocol::VERSION,
            session_id: "0197c2a4-5f1e-7b3a-9c41-2d8e6f0a1b37".to_owned(),
            rev: 7,
            append: vec![
                Turn {
                    role: TurnRole::User,
                    text: "[Human] Add a --json flag to `report`.".to_owned(),
                },
                Turn {
                    role: TurnRole::Assistant,
                    text: r#"{"intent":"summon_orchestrator","message":"Add the flag."}"#
                        .to_owned(),
                },
            ],
            replace: false,
            snapshot: Snapshot::new(at),
            outbox: vec![Effect::Summon(summon), Effect::Log(entry)],
        };
        let mut data = b"1".to_vec();
        data.extend(serde_json::to_vec(&record).unwrap_or_default());
        seed_is("protocol_records", "session-step-record.json", &data);
    }
}
