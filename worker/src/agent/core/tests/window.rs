//! The core's table cases: the edge of the window.

use super::*;

#[test]
fn at_the_edge_the_last_packet_written_is_handed_off() {
    let mut core = core();
    let reply = json!({"expects_response": false, "message": "a", "handoff": packet()});
    core.take_reply(text_reply(&reply.to_string(), StopReason::EndTurn));
    match core.at_edge(&Edge::Full {
        prompt: 99_000,
        window: 100_000,
    }) {
        AtEdge::HandOff(out) => {
            assert!(out.expects_response);
            assert!(out.message.contains("about 99000 of its 100000 tokens"));
            assert!(out.message.contains("the last one I wrote"));
            assert_eq!(out.handoff.unwrap().next_step, "write the parser");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn at_the_edge_with_no_packet_one_is_made_from_the_workspace() {
    let mut core = core();
    let edge = Edge::Refused("prompt is too long".into());
    assert!(matches!(core.at_edge(&edge), AtEdge::NeedsFiles));
    let files = FileChanges {
        changed: vec!["src/lib.rs".into()],
        ..FileChanges::default()
    };
    let out = Core::hand_off_with(&edge, &files);
    assert!(out.message.contains("more than the server takes"));
    assert_eq!(out.handoff.unwrap().done[0].files, ["src/lib.rs"]);
}

#[test]
fn at_the_edge_a_second_time_it_fails_with_the_context_error() {
    let mut core = core();
    let edge = Edge::Refused("too long".into());
    core.at_edge(&edge);
    match core.at_edge(&edge) {
        AtEdge::Fail(WireError::Model { class, message, .. }) => {
            assert_eq!(class, ModelErrorKind::ContextExceeded);
            assert!(message.contains("handed off at the edge already"));
        }
        other => panic!("{other:?}"),
    }
}
