//! Subagent loop tests against a scripted in-process model.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter_llm::{Block, LlmError, Model, Request, Response, StopReason, StreamEvent, ToolSpec};
use arbiter_protocol::{OrchestratorState, OrchestratorStatus};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Limits, SubagentRole, run};
use crate::status::StatusHandle;
use crate::tools::task::TaskInput;
use crate::tools::{BASIC_TOOLS, ToolContext};
use crate::workspace::Workspace;

/// Answers each call with the next scripted response; `None` hangs forever.
#[derive(Default)]
struct Scripted {
    replies: Mutex<VecDeque<Option<Response>>>,
    requests: Mutex<Vec<Request>>,
}

impl Scripted {
    fn new(replies: Vec<Option<Response>>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            requests: Mutex::default(),
        })
    }
    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Model for Scripted {
    fn stream(
        &self,
        request: Request,
    ) -> BoxFuture<'_, arbiter_llm::Result<BoxStream<'static, arbiter_llm::Result<StreamEvent>>>>
    {
        self.requests.lock().unwrap().push(request);
        let next = self.replies.lock().unwrap().pop_front();
        Box::pin(async move {
            match next {
                Some(Some(response)) => {
                    Ok(futures::stream::iter([Ok(StreamEvent::Completed(response))]).boxed())
                }
                Some(None) => futures::future::pending().await,
                None => Err(LlmError::Stream("no scripted reply".into())),
            }
        })
    }

    fn name(&self) -> &str {
        "scripted"
    }
}

fn text(text: &str) -> Option<Response> {
    Some(Response {
        content: vec![Block::Text { text: text.into() }],
        stop_reason: StopReason::EndTurn,
        usage: Default::default(),
    })
}

fn tool(name: &str, input: serde_json::Value) -> Option<Response> {
    Some(Response {
        content: vec![Block::ToolUse {
            id: format!("t-{name}"),
            name: name.into(),
            input,
        }],
        stop_reason: StopReason::ToolUse,
        usage: Default::default(),
    })
}

fn setup(
    model: Arc<Scripted>,
    max_calls: u32,
) -> (tempfile::TempDir, ToolContext, SubagentRole, StatusHandle) {
    let base = tempfile::tempdir().unwrap();
    let ctx = ToolContext {
        workspace: Workspace::open(base.path(), "s").unwrap(),
        cancel: CancellationToken::new(),
        sandbox: std::sync::Arc::new(
            crate::sandbox::Sandbox::new(&Default::default(), base.path()).unwrap(),
        ),
        mcp: Default::default(),
    };
    let role = SubagentRole {
        model,
        model_name: "m".into(),
        prices: arbiter_llm::price::PriceTable::defaults(),
        context_budget: 1000,
        max_calls,
    };
    let status = StatusHandle::new(
        OrchestratorStatus {
            spend: Default::default(),
            v: 1,
            session_id: "s".into(),
            orch_id: "o".into(),
            number: 1,
            worker_id: "w".into(),
            state: OrchestratorState::Working,
            context_pct: 0.0,
            context_tokens: 0,
            context_budget: 1000,
            current_tool: None,
            tool_count: 0,
            parked: false,
            mcp_failures: Vec::new(),
            branch: None,
            at: chrono::Utc::now(),
        },
        None,
    );
    (base, ctx, role, status)
}

fn task(prompt: &str) -> TaskInput {
    TaskInput {
        description: Some("test".into()),
        prompt: prompt.into(),
    }
}

fn names(tools: &[ToolSpec]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test]
async fn a_subagent_works_with_tools_and_returns_its_last_text() {
    let model = Scripted::new(vec![
        tool(
            "write",
            json!({"path": "out.txt", "content": "made by the subagent\n"}),
        ),
        text("Wrote out.txt (1 line)."),
    ]);
    let (_base, ctx, role, status) = setup(model.clone(), 10);
    let out = run(
        &role,
        &ctx,
        task("Write out.txt."),
        &status,
        Limits::default(),
    )
    .await;
    assert_eq!(out.content, "Wrote out.txt (1 line).");
    assert!(!out.is_error);
    assert_eq!(
        std::fs::read_to_string(ctx.workspace.root().join("out.txt")).unwrap(),
        "made by the subagent\n"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    // A fresh context: the prompt alone, the basic tools, no schema.
    assert_eq!(
        *requests[0].messages,
        vec![arbiter_llm::Message::user("Write out.txt.")]
    );
    assert_eq!(names(&requests[0].tools), BASIC_TOOLS);
    assert!(requests[0].output_schema.is_none());
    assert!(requests[0].system.contains("subagent"));
    assert_eq!(requests[1].messages.len(), 3);
    assert_eq!(status.get().current_tool.as_deref(), Some("Task"));
}

#[tokio::test]
async fn a_subagent_is_stopped_at_its_call_limit() {
    let model = Scripted::new(vec![
        tool("bash", json!({"command": "true"})),
        tool("bash", json!({"command": "true"})),
        tool("bash", json!({"command": "true"})),
        text("never reached"),
    ]);
    let (_base, ctx, role, status) = setup(model.clone(), 3);
    let out = run(
        &role,
        &ctx,
        task("Loop forever."),
        &status,
        Limits::default(),
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.content.contains("stopped after 3 model calls"),
        "{}",
        out.content
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let last = format!("{:?}", requests[2].messages.last().unwrap());
    assert!(last.contains("one model call left"), "{last}");
}

#[tokio::test]
async fn failures_and_cancellation_are_error_results() {
    let (_base, ctx, role, status) = setup(Scripted::new(vec![]), 5);
    let out = run(&role, &ctx, task("Anything."), &status, Limits::default()).await;
    assert!(
        out.is_error && out.content.contains("model call failed"),
        "{out:?}"
    );

    let (_base, ctx, role, status) = setup(Scripted::new(vec![text("  ")]), 5);
    let out = run(&role, &ctx, task("Anything."), &status, Limits::default()).await;
    assert!(
        out.is_error && out.content.contains("without a report"),
        "{out:?}"
    );

    let (_base, ctx, role, status) = setup(Scripted::new(vec![]), 5);
    let out = run(&role, &ctx, task(" "), &status, Limits::default()).await;
    assert!(
        out.is_error && out.content.contains("prompt is empty"),
        "{out:?}"
    );

    let (_base, ctx, role, status) = setup(Scripted::new(vec![None]), 5);
    let cancel = ctx.cancel.clone();
    let call = async { run(&role, &ctx, task("Hang."), &status, Limits::default()).await };
    let (out, ()) = tokio::join!(call, async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    assert!(out.is_error && out.content.contains("cancelled"), "{out:?}");
}

#[tokio::test]
async fn a_subagent_starts_no_request_past_the_orchestrators_allowance() {
    let costly = |response: Option<Response>| {
        response.map(|r| Response {
            usage: Some(arbiter_llm::Usage {
                input_tokens: 900,
                output_tokens: 100,
                ..Default::default()
            }),
            ..r
        })
    };
    let model = Scripted::new(vec![
        costly(tool("bash", json!({"command": "true"}))),
        costly(tool("bash", json!({"command": "true"}))),
        text("never reached"),
    ]);
    let (_base, ctx, role, status) = setup(model.clone(), 10);
    let left = arbiter_protocol::Cap {
        tokens: Some(1_500),
        cost_nanos: None,
    };
    let out = run(
        &role,
        &ctx,
        task("Loop."),
        &status,
        Limits {
            allowance: Some(left),
            ..Limits::default()
        },
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.content.starts_with(
            "task: the subagent was stopped before its model call 3: the Orchestrator's budget \
             is spent"
        ),
        "{}",
        out.content
    );
    assert_eq!(model.requests().len(), 2);
    // What it spent still counts.
    assert_eq!(out.spend.tokens(), 2_000);
}

/// A subagent's calls are held to its Orchestrator's policy: a call that
/// would ask is not run (a subagent cannot wait for the human) and its
/// model is told to leave it to the Orchestrator; a denied one names the
/// rule; the rest run.
#[tokio::test]
async fn a_subagents_calls_are_held_to_its_orchestrators_policy() {
    let model = Scripted::new(vec![
        tool(
            "write",
            json!({"path": "asked.txt", "content": "should not be written\n"}),
        ),
        tool(
            "edit",
            json!({"path": "x.env", "old_string": "a", "new_string": "b"}),
        ),
        tool("write", json!({"path": "ok.md", "content": "fine\n"})),
        text("Done, but asked.txt needs the Orchestrator."),
    ]);
    let (_base, ctx, role, status) = setup(model.clone(), 10);
    let policy = arbiter_protocol::Policy::parse("ask write(*.txt); deny edit(*.env)").unwrap();
    let layers = arbiter_protocol::Layers::new(policy, Vec::new()).unwrap();
    let limits = Limits {
        layers: Some(&layers),
        ..Limits::default()
    };
    let out = run(&role, &ctx, task("Write things."), &status, limits).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(!ctx.workspace.root().join("asked.txt").exists());
    assert!(ctx.workspace.root().join("ok.md").exists());
    let requests = model.requests();
    let result = |n: usize| match &requests[n].messages.last().unwrap().content[0] {
        Block::ToolResult {
            content, is_error, ..
        } => (content.clone(), *is_error),
        other => panic!("{other:?}"),
    };
    let (asked, is_error) = result(1);
    assert!(is_error);
    assert!(
        asked.contains("which a subagent cannot wait for: leave this call to your Orchestrator"),
        "{asked}"
    );
    let (denied, is_error) = result(2);
    assert!(is_error);
    assert!(
        denied.contains("denied by the policy: `deny edit(*.env)`"),
        "{denied}"
    );
    assert!(!result(3).1);
}
