//! The CLI's turns doing the work: the context warnings through its hook,
//! the 85 % packet rule, and subagents through its Task tool.

use crate::common::*;
use arbiter_protocol::LogBody;
use arbiter_tests::MockReply;
use arbiter_worker::context::{CRITICAL_MARK, NOTICE_MARK};
use serde_json::json;
use std::sync::{Arc, Mutex};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_warnings_reach_the_cli_model_through_its_hook() {
    let sys = claude_system(1).await;
    let s = "s-warn";
    let brief = "Fill your context.";
    let lane = orch_lane(brief);
    let ws = sys.workspace(s);
    // 150k and then 175k of the 200k budget: 75 %, then 87.5 %.
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws.join("a.txt"), "content": "a\n"}),
        )
        .usage(140_000, 20, 0, 10_000),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws.join("b.txt"), "content": "b\n"}),
        )
        .usage(175_000, 20, 0, 0),
    );
    sys.mock.push(&lane, output(true, "Full."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the Orchestrator's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Full."),
    )
    .await;
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    let texts: Vec<String> = requests.iter().map(|r| r.all_text()).collect();
    assert!(!texts[0].contains(NOTICE_MARK) && !texts[0].contains(CRITICAL_MARK));
    // After the first Write: the notice at 75 %, as the hook's additional context.
    assert!(
        texts[1].contains(&format!("{NOTICE_MARK}: 75% of your context is used")),
        "{}",
        texts[1]
    );
    assert!(!texts[1].contains(CRITICAL_MARK));
    // After the second: the critical warning, telling it to report.
    assert!(
        texts[2].contains(&format!("{CRITICAL_MARK}: 88% of your context is used")),
        "{}",
        texts[2]
    );
    assert!(texts[2].contains("Report to the Arbiter now"));

    // The turn's usage and cost, from the CLI's `result` line, are in the
    // Orchestrator's records: the three requests' figures added up.
    let orch_id = log
        .bodies()
        .iter()
        .find_map(|b| match b {
            LogBody::Summoned(s) => Some(s.orch_id.clone()),
            _ => None,
        })
        .unwrap();
    let record = last_state_record(&sys, &orch_id).await;
    let cost = &record["snapshot"]["cost"];
    assert_eq!(cost["turns"], 1, "{cost}");
    assert_eq!(cost["input_tokens"], 140_000 + 175_000 + 100, "{cost}");
    assert_eq!(cost["cache_read_input_tokens"], 10_000, "{cost}");
    assert_eq!(cost["output_tokens"], 60, "{cost}");
    assert!(cost["cost_usd"].as_f64().unwrap() > 0.0, "{cost}");
    assert_eq!(
        cost["last_turn"]["usage"]["input_tokens"], 315_100,
        "{cost}"
    );
    assert!(
        cost["last_turn"]["model_usage"]["mock-orch"]["costUSD"].is_number(),
        "{cost}"
    );
}

/// Past 85 % a CLI Orchestrator's report must carry its handoff packet, as
/// on the native loop: a report without one goes back to the CLI with the
/// reason, and the repaired report reaches the log with its packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_85_percent_a_cli_report_without_a_packet_is_sent_back_for_one() {
    let sys = claude_system(1).await;
    let s = "s-cli-packet";
    let brief = "Fill up and report.";
    let lane = orch_lane(brief);
    let ws = sys.workspace(s);
    // 180k of the 200k budget: 90 %.
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws.join("a.txt"), "content": "a\n"}),
        )
        .usage(180_000, 20, 0, 0),
    );
    // The context a reply reports is its request's: the report's is 91 %.
    sys.mock.push(
        &lane,
        output(true, "Done, no packet.").usage(182_000, 20, 0, 0),
    );
    let packet = json!({
        "done": [{"id": "T1", "what": "wrote a.txt", "files": ["a.txt"]}],
        "open": [{"id": "T2", "what": "write b.txt"}],
        "decisions": [],
        "questions": [],
        "next_step": "Write b.txt.",
    });
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "StructuredOutput",
            json!({"expects_response": true, "message": "Done, with a packet.", "handoff": packet}),
        )
        .usage(183_000, 20, 0, 0),
    );
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    let at = log
        .wait_for(
            "the repaired report",
            |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done, with a packet."),
        )
        .await;
    // The report without a packet never reached the log.
    assert!(
        !log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done, no packet."))
    );
    let LogBody::Orchestrator(report) = &log.bodies()[at] else {
        unreachable!()
    };
    let carried = report
        .handoff
        .as_ref()
        .expect("the packet rides on the report");
    assert_eq!(carried.open[0].id, "T2");
    // The CLI's model was told why, in the next user line it got.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    assert!(
        requests[2]
            .all_text()
            .contains("91% of your context is used, so this reply must carry your `handoff`"),
        "{}",
        requests[2].all_text()
    );
}

/// The CLI's own subagents: the Orchestrator's model calls the `Task` tool
/// (sent as `Agent` on the wire), the CLI runs the subagent with its own
/// requests to the model, and the subagent's answer comes back to the
/// Orchestrator's model as the tool's result. The console's status names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_orchestrator_runs_a_subagent_through_the_task_tool() {
    let sys = claude_system(1).await;
    let s = "s-cli-task";
    let brief = "Ask a helper.";
    let lane = orch_lane(brief);
    let asked = "Count the files under src and answer with the number.";
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Agent",
            json!({"description": "count files", "prompt": asked, "subagent_type": "general-purpose"}),
        ),
    );
    // The subagent's own request: its first user message is the prompt it was given.
    sys.mock.push(
        &orch_lane(asked),
        MockReply::text("There are 7 files under src."),
    );
    sys.mock.push(&lane, output(true, "The helper counted 7."));
    let statuses = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = statuses.clone();
    let mut sub = sys
        .bus
        .client
        .subscribe(arbiter_protocol::subjects::ALL_ORCH_STATUS.to_owned())
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(msg) = futures::StreamExt::next(&mut sub).await {
            if let Ok(status) =
                serde_json::from_slice::<arbiter_protocol::OrchestratorStatus>(&msg.payload)
                && let Some(tool) = status.current_tool
            {
                seen.lock()
                    .unwrap()
                    .push(format!("{tool} ({})", status.tool_count));
            }
        }
    });
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "The helper counted 7."),
    )
    .await;
    let sub_requests = sys.mock.requests_for(&orch_lane(asked));
    assert_eq!(sub_requests.len(), 1, "{:?}", sys.mock.lane_counts());
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 2);
    let back = requests[1].all_text();
    assert!(back.contains("There are 7 files under src."), "{back}");
    assert!(
        statuses
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.starts_with("Agent")),
        "{:?}",
        statuses.lock().unwrap()
    );
}
