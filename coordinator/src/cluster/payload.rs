//! What the intake reads out of a message before it knows the session:
//! the session a human line names, and the outputs a message on
//! `orch.<id>.out` carries.

use arbiter_bus::decode;
use arbiter_protocol::{OrchestratorMessage, WireError, subjects};

/// The session a human line's payload names, read leniently (so that a
/// line that does not decode is still reported where it was meant to go):
/// `None` when there is none that is a valid token.
pub(super) fn session_named_in(payload: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        session_id: String,
    }
    serde_json::from_slice::<Named>(payload)
        .ok()
        .map(|named| named.session_id)
        .filter(|id| subjects::is_valid_token(id))
}

/// The outputs a message on `orch.<orch_id>.out` carries: one bare
/// [`OrchestratorMessage`] (what a worker in another language publishes), or
/// a worker's state record whose `outbox` is its outputs (the native worker
/// stores a step with outputs as one message there; its other fields are the
/// worker's own and ignored here). Told apart by the `outbox` key. Each
/// output must name the subject's Orchestrator, and all one session; they
/// come in `seq` order, with their session's id.
pub(crate) fn outputs_of(
    subject: &str,
    payload: &[u8],
) -> Result<(String, Vec<OrchestratorMessage>), WireError> {
    // One pass for a record (what the native worker sends); a second, as
    // the message itself, only when there is no `outbox`.
    #[derive(serde::Deserialize)]
    struct Record {
        #[serde(default)]
        outbox: Option<Vec<OrchestratorMessage>>,
    }
    let malformed = |detail: &str| WireError::MalformedMessage {
        subject: subject.to_owned(),
        detail: detail.to_owned(),
    };
    let mut messages = match decode::<Record>(subject, payload)?.outbox {
        Some(outbox) => outbox,
        None => vec![decode::<OrchestratorMessage>(subject, payload)?],
    };
    let Some(first) = messages.first() else {
        return Err(malformed("a state record with no outputs"));
    };
    let subject_orch = subjects::id_of(subject, "orch", "out");
    let session = first.session_id.clone();
    if !subjects::is_valid_token(&session)
        || messages
            .iter()
            .any(|m| subject_orch != Some(m.orch_id.as_str()) || m.session_id != session)
    {
        return Err(malformed(
            "its orch_id or session_id does not match the subject",
        ));
    }
    messages.sort_by_key(|m| m.seq);
    Ok((session, messages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBJECT: &str = "arbiter.v1.orch.o-1.out";

    fn message(seq: u64) -> serde_json::Value {
        json!({"v":1,"session_id":"s-1","orch_id":"o-1","seq":seq,
               "event":{"type":"output","expects_response":true,"message":format!("m{seq}")},
               "sent_at":"2026-01-01T00:00:00Z"})
    }

    fn seqs(payload: &serde_json::Value) -> Result<(String, Vec<u64>), WireError> {
        outputs_of(SUBJECT, payload.to_string().as_bytes())
            .map(|(s, ms)| (s, ms.into_iter().map(|m| m.seq).collect()))
    }

    #[test]
    fn a_bare_output_or_a_state_record_that_is_outputs() {
        assert_eq!(seqs(&message(3)).unwrap(), ("s-1".to_owned(), vec![3]));
        // A state record: its other fields (the worker's own) are ignored.
        let record = json!({"rev":7,"orch_id":"o-1","append":[{"x":1}],
                            "snapshot":{"anything":true},"outbox":[message(5), message(4)]});
        assert_eq!(seqs(&record).unwrap(), ("s-1".to_owned(), vec![4, 5]));
    }

    #[test]
    fn a_record_is_malformed_as_an_output_is() {
        let mut other = message(2);
        other["orch_id"] = json!("o-2");
        let mut elsewhere = message(2);
        elsewhere["session_id"] = json!("s-2");
        for bad in [
            json!({"rev":1,"outbox":[]}),
            json!({"rev":1,"outbox":[message(1), other.clone()]}),
            json!({"rev":1,"outbox":[message(1), elsewhere]}),
            json!({"rev":1,"outbox":[{"seq":"x"}]}),
            json!({"rev":1,"outbox":7}),
            // No outbox: the message itself, malformed.
            json!({"v":1,"session_id":"s-1","orch_id":"o-1","seq":"x"}),
            json!([1, 2]),
            other,
        ] {
            let err = seqs(&bad).unwrap_err();
            assert!(
                matches!(&err, WireError::MalformedMessage { subject, .. } if subject == SUBJECT),
                "{bad}: {err:?}"
            );
        }
    }
}
