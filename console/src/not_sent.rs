//! What the console says when NATS refuses a human line. The server bounds
//! the human intake per console (docs/protocol.md, "Limits per console"):
//! its refusals are put in words a human can act on, the server's own words
//! after them.

use arbiter_bus::BusError;
use arbiter_bus::setup::{HUMAN_MAX_MESSAGE_BYTES, HUMAN_PENDING_PER_CONSOLE};

/// Why a line was not sent, as the console shows it after `message not sent: `.
pub fn reason(error: &BusError) -> String {
    let said = error.to_string();
    // The server's error codes: maximum messages per subject exceeded, and
    // message size exceeds maximum allowed.
    if said.contains("10077") {
        format!(
            "the server already holds {HUMAN_PENDING_PER_CONSOLE} lines of this console that \
             no coordinator has taken yet, the most it keeps for one console. Wait until they \
             are taken (is a coordinator running?) and send it again ({said})"
        )
    } else if said.contains("10054") {
        format!(
            "the line is larger than the {} KiB the server stores for one; send it in parts \
             ({said})",
            HUMAN_MAX_MESSAGE_BYTES / 1024
        )
    } else {
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(message: &str) -> BusError {
        arbiter_bus::js_error("publish to arbiter.v1.session.s1.human.alice", message)
    }

    #[test]
    fn the_servers_refusals_are_said_for_a_human() {
        let full = refused(
            "publish failed: maximum messages per subject exceeded (code 503, error code 10077)",
        );
        assert_eq!(
            reason(&full),
            "the server already holds 64 lines of this console that no coordinator has taken \
             yet, the most it keeps for one console. Wait until they are taken (is a \
             coordinator running?) and send it again (JetStream publish to \
             arbiter.v1.session.s1.human.alice failed: publish failed: maximum messages per \
             subject exceeded (code 503, error code 10077))"
        );
        let large = refused(
            "publish failed: message size exceeds maximum allowed (code 400, error code 10054)",
        );
        assert!(reason(&large).starts_with(
            "the line is larger than the 512 KiB the server stores for one; send it in parts"
        ));
        let other = refused("timed out: didn't receive ack in time");
        assert_eq!(reason(&other), other.to_string());
    }
}
