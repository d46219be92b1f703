//! OpenTelemetry across the real binaries: the console, the coordinator and
//! the worker export to an OTLP/HTTP receiver (protobuf, decoded with the
//! `opentelemetry-proto` types), and one human line is one trace through
//! all three, down to each model request. And an endpoint that does not
//! answer costs the conversation nothing but one warning line.

use crate::common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use arbiter_tests::otlp::{Attr, ReceivedPoint, ReceivedSpan};
use arbiter_tests::{MockAnthropic, MockReply, NatsServer, OtlpReceiver, bin};
use common::{API_KEY, ARBITER_MODEL, ORCH_MODEL, SUB_MODEL, arbiter, lane_of, orch};
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

const BRIEF: &str = "Brief: write hello.txt saying hello, and have a subagent check it.";
const SUB_PROMPT: &str = "Read hello.txt and say what it holds.";
const HUMAN: &str = "Build me a greeting";

fn command(name: &str, nats: &NatsServer, mock: &MockAnthropic, otlp: &str) -> Command {
    let mut command = Command::new(bin(name));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NATS_URL", nats.url())
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("RUST_LOG", "info,async_nats=warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        // Batches go out every 100 ms rather than every 5 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

async fn services(
    nats: &NatsServer,
    mock: &MockAnthropic,
    otlp: &str,
    root: &str,
) -> (Child, Child) {
    let coordinator = command("arbiter-coordinator", nats, mock, otlp)
        .env("ARBITER_MODEL", format!("anthropic:{ARBITER_MODEL}"))
        .spawn()
        .unwrap();
    let worker = command("arbiter-worker", nats, mock, otlp)
        .env("ORCHESTRATOR_MODEL", format!("anthropic:{ORCH_MODEL}"))
        .env("SUBAGENT_MODEL", format!("anthropic:{SUB_MODEL}"))
        .env("ARBITER_WORKSPACE_ROOT", root)
        .env("ARBITER_MAX_ORCHESTRATORS", "2")
        .spawn()
        .unwrap();
    // The console needs the streams the coordinator makes, every one of
    // them (the coordinator makes them one after another; the console stops
    // at once, saying so, when one is missing).
    let js = nats.jetstream().await;
    for stream in arbiter_protocol::roles::streams_used(arbiter_protocol::roles::NatsRole::Console)
    {
        arbiter_tests::eventually(Duration::from_secs(20), "the streams", || async {
            js.get_stream(&stream).await.ok().map(|_| ())
        })
        .await;
    }
    (coordinator, worker)
}

/// Each scripted reply reports its own usage, so that every model span can
/// be matched to the reply it carries: (input, output, cache write, cache read).
fn script(mock: &MockAnthropic) -> Vec<(String, [u64; 4])> {
    let arb = format!("{ARBITER_MODEL}:{HUMAN}");
    let orch_lane = format!("{ORCH_MODEL}:{BRIEF}");
    let sub = format!("{SUB_MODEL}:{SUB_PROMPT}");
    let replies = [
        (
            &arb,
            arbiter("summon_orchestrator", BRIEF),
            [1100, 51, 0, 0],
        ),
        (
            &orch_lane,
            MockReply::tool_use("write", json!({"path": "hello.txt", "content": "hello\n"})),
            [2100, 61, 300, 0],
        ),
        (
            &orch_lane,
            MockReply::tool_use(
                "task",
                json!({"description": "check", "prompt": SUB_PROMPT}),
            ),
            [2200, 62, 0, 300],
        ),
        (&sub, MockReply::text("It says hello."), [3100, 71, 0, 0]),
        (
            &orch_lane,
            orch(true, "Wrote hello.txt; a subagent read it back."),
            [2300, 63, 0, 300],
        ),
        (
            &arb,
            arbiter("release_orchestrators", "It is done."),
            [1200, 52, 0, 40],
        ),
    ];
    replies
        .into_iter()
        .map(|(lane, reply, [i, o, w, r])| {
            mock.push(lane, reply.usage(i, o, w, r));
            let model = lane.split(':').next().unwrap().to_owned();
            (model, [i, o, w, r])
        })
        .collect()
}

/// Runs the console for one line and waits for it to settle and exit.
async fn console_line(nats: &NatsServer, mock: &MockAnthropic, otlp: &str, s: &str) -> String {
    let mut console = command("arbiter-console", nats, mock, otlp)
        .args(["--plain", "--session", s])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = console.stdin.take().unwrap();
    stdin
        .write_all(format!("{HUMAN}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(40), console.wait_with_output())
        .await
        .expect("the console exits once the session settles")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "console failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(stdout.ends_with("Arbiter: It is done.\n"), "{stdout}");
    stderr
}

async fn stop(child: Child) -> String {
    let pid = child.id().unwrap().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .expect("the service stops within 15 s")
        .unwrap();
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn one<'a>(
    spans: &'a [ReceivedSpan],
    what: &str,
    f: impl Fn(&ReceivedSpan) -> bool,
) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans.iter().filter(|s| f(s)).collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one span: {what}; spans: {spans:#?}"
    );
    found[0]
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_human_line_is_one_trace_across_the_three_binaries() {
    arbiter_tests::init_tracing();
    let receiver = OtlpReceiver::start().await;
    let otlp = receiver.endpoint();
    let nats = NatsServer::start().await;
    let mock = MockAnthropic::start().await;
    mock.set_lane_fn(lane_of);
    let workspaces = tempfile::tempdir().unwrap();
    let root = workspaces.path().to_str().unwrap().to_owned();
    let expected = script(&mock);
    let (coordinator, worker) = services(&nats, &mock, &otlp, &root).await;

    let s = "s-otel";
    let console_log = console_line(&nats, &mock, &otlp, s).await;
    // Stopped, the services export what they still hold.
    let coordinator_log = stop(coordinator).await;
    let worker_log = stop(worker).await;
    let spans = arbiter_tests::eventually(
        Duration::from_secs(20),
        "the spans of every model request",
        || async {
            let spans = receiver.spans();
            (named(&spans, "chat mock-sub").len() == 1
                && named(&spans, "chat mock-orch").len() == 3
                && named(&spans, "chat mock-arbiter").len() == 2)
                .then_some(spans)
        },
    )
    .await;

    // The console starts the trace; everything else is in it.
    let line = one(&spans, "the console's line", |s| {
        s.name == "console human line"
    });
    assert_eq!(line.service, "arbiter-console");
    assert_eq!(line.parent_span_id, "");
    assert_eq!(line.str("session.id"), Some(s));
    let trace: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|sp| sp.trace_id == line.trace_id)
        .collect();
    let by_id: BTreeMap<&str, &ReceivedSpan> =
        trace.iter().map(|sp| (sp.span_id.as_str(), *sp)).collect();
    let parent = |sp: &ReceivedSpan| -> String {
        by_id
            .get(sp.parent_span_id.as_str())
            .map(|p| p.name.clone())
            .unwrap_or_else(|| format!("<not in the trace: {:?}>", sp.parent_span_id))
    };

    // The path, span by span: (name, its parent's name, its service).
    let mut path: Vec<(String, String, String)> = trace
        .iter()
        .filter(|sp| sp.name != "console human line")
        .map(|sp| (sp.name.clone(), parent(sp), sp.service.clone()))
        .collect();
    path.sort();
    let row = |name: &str, parent: &str, service: &str| {
        (name.to_owned(), parent.to_owned(), service.to_owned())
    };
    let mut want = vec![
        // The human's line starts the Arbiter's first turn, which summons.
        row(
            "invoke_agent arbiter",
            "console human line",
            "arbiter-coordinator",
        ),
        row(
            "chat mock-arbiter",
            "invoke_agent arbiter",
            "arbiter-coordinator",
        ),
        row(
            "arbiter route",
            "invoke_agent arbiter",
            "arbiter-coordinator",
        ),
        // The summons starts the Orchestrator's turn on the worker.
        row(
            "invoke_agent orchestrator",
            "arbiter route",
            "arbiter-worker",
        ),
        row(
            "chat mock-orch",
            "invoke_agent orchestrator",
            "arbiter-worker",
        ),
        row(
            "chat mock-orch",
            "invoke_agent orchestrator",
            "arbiter-worker",
        ),
        row(
            "chat mock-orch",
            "invoke_agent orchestrator",
            "arbiter-worker",
        ),
        row(
            "execute_tool write",
            "invoke_agent orchestrator",
            "arbiter-worker",
        ),
        row(
            "execute_tool task",
            "invoke_agent orchestrator",
            "arbiter-worker",
        ),
        row(
            "invoke_agent subagent",
            "execute_tool task",
            "arbiter-worker",
        ),
        row("chat mock-sub", "invoke_agent subagent", "arbiter-worker"),
        // Its report starts the Arbiter's second turn, which releases it.
        row(
            "invoke_agent arbiter",
            "invoke_agent orchestrator",
            "arbiter-coordinator",
        ),
        row(
            "chat mock-arbiter",
            "invoke_agent arbiter",
            "arbiter-coordinator",
        ),
        row(
            "arbiter route",
            "invoke_agent arbiter",
            "arbiter-coordinator",
        ),
    ];
    want.sort();
    assert_eq!(path, want);

    // The routing decisions carry their intent.
    let mut intents: Vec<&str> = trace
        .iter()
        .filter(|sp| sp.name == "arbiter route")
        .filter_map(|sp| sp.str("arbiter.intent"))
        .collect();
    intents.sort();
    assert_eq!(intents, ["release_orchestrators", "summon_orchestrator"]);

    // Every model span carries what the mock reported, GenAI-style.
    let mut got: Vec<(String, [u64; 4])> = trace
        .iter()
        .filter(|sp| sp.str("gen_ai.operation.name") == Some("chat"))
        .map(|sp| {
            assert_eq!(sp.str("gen_ai.provider.name"), Some("anthropic"));
            let model = sp.str("gen_ai.request.model").unwrap().to_owned();
            assert_eq!(sp.str("gen_ai.response.model"), Some(model.as_str()));
            assert!(sp.str("gen_ai.response.finish_reasons").is_some(), "{sp:?}");
            let int = |k: &str| {
                u64::try_from(sp.int(k).unwrap_or(-1)).unwrap_or_else(|_| panic!("{k} of {sp:?}"))
            };
            let write = int("gen_ai.usage.cache_creation.input_tokens");
            let read = int("gen_ai.usage.cache_read.input_tokens");
            // The conventions' input count holds the cached tokens too.
            let input = int("gen_ai.usage.input_tokens") - write - read;
            (
                model,
                [input, int("gen_ai.usage.output_tokens"), write, read],
            )
        })
        .collect();
    got.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(got, expected);

    // No prompt or completion text, no key, by default.
    for sp in &spans {
        for (key, value) in &sp.attributes {
            let text = format!("{value:?}");
            for secret in [API_KEY, BRIEF, SUB_PROMPT, HUMAN, "It is done."] {
                assert!(
                    !text.contains(secret),
                    "{key} of {} holds {secret:?}",
                    sp.name
                );
            }
        }
    }
    for log in [&console_log, &coordinator_log, &worker_log] {
        assert!(!log.contains("OpenTelemetry"), "no export trouble: {log}");
    }

    // The metrics, on the same pipeline (cumulative: the last point of a
    // series is its total). The conventions' token histogram, by type and role:
    let points = receiver.points();
    let last = |service: &str, metric: &str, attrs: &[(&str, &str)]| -> ReceivedPoint {
        points
            .iter()
            .rev()
            .find(|p| {
                p.service == service
                    && p.metric == metric
                    && attrs
                        .iter()
                        .all(|(k, v)| p.attributes.get(*k).and_then(Attr::as_str) == Some(*v))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {metric} {attrs:?} from {service}: {points:#?}"))
    };
    let orch_input = last(
        "arbiter-worker",
        "gen_ai.client.token.usage",
        &[
            ("gen_ai.request.model", ORCH_MODEL),
            ("gen_ai.token.type", "input"),
            ("arbiter.role", "orchestrator"),
        ],
    );
    let want_input: u64 = expected
        .iter()
        .filter(|(m, _)| m.as_str() == ORCH_MODEL)
        .map(|(_, [i, _, w, r])| i + w + r)
        .sum();
    assert_eq!(
        (orch_input.value, orch_input.sum),
        (3.0, Some(want_input as f64))
    );
    let sub_output = last(
        "arbiter-worker",
        "gen_ai.client.token.usage",
        &[
            ("gen_ai.request.model", SUB_MODEL),
            ("gen_ai.token.type", "output"),
            ("arbiter.role", "subagent"),
        ],
    );
    assert_eq!(sub_output.sum, Some(71.0));
    let arbiter_calls = last(
        "arbiter-coordinator",
        "gen_ai.client.operation.duration",
        &[
            ("gen_ai.request.model", ARBITER_MODEL),
            ("arbiter.role", "arbiter"),
        ],
    );
    assert_eq!(arbiter_calls.value, 2.0);
    // Tool calls by tool and outcome.
    for tool in ["write", "task"] {
        let calls = last(
            "arbiter-worker",
            "arbiter.tool.calls",
            &[("gen_ai.tool.name", tool), ("arbiter.outcome", "ok")],
        );
        assert_eq!(calls.value, 1.0, "{tool}");
    }
    // Routing latency per hop, each hop measured where its message is taken.
    for (service, hop, count) in [
        ("arbiter-coordinator", "console→coordinator", 1.0),
        ("arbiter-worker", "coordinator→worker", 1.0),
        ("arbiter-coordinator", "worker→coordinator", 1.0),
    ] {
        let hops = last(service, "arbiter.routing.duration", &[("arbiter.hop", hop)]);
        assert_eq!(hops.value, count, "{hop}");
    }
    // A model call started early (on an output or input seen as it was
    // published) is taken by its turn here: none was paid for and dropped.
    let dropped: Vec<&ReceivedPoint> = points
        .iter()
        .filter(|p| {
            p.metric == "arbiter.model.early_calls"
                && p.attributes.get("arbiter.outcome").and_then(Attr::as_str) == Some("dropped")
        })
        .collect();
    assert!(dropped.is_empty(), "early calls dropped: {dropped:#?}");
    // Live sessions and Orchestrators, and the summons queue.
    last("arbiter-coordinator", "arbiter.sessions.live", &[]);
    last("arbiter-worker", "arbiter.orchestrators.live", &[]);
    last(
        "arbiter-worker",
        "arbiter.summons.pending",
        &[("arbiter.pool", "default")],
    );
}

/// An OTLP endpoint that refuses connections: the conversation goes on as
/// before, and each process says so once, in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_costs_one_warning_line_and_nothing_else() {
    arbiter_tests::init_tracing();
    // A port nobody listens on.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let nats = NatsServer::start().await;
    let mock = MockAnthropic::start().await;
    mock.set_lane_fn(lane_of);
    let workspaces = tempfile::tempdir().unwrap();
    let root = workspaces.path().to_str().unwrap().to_owned();
    script(&mock);
    let (coordinator, worker) = services(&nats, &mock, &dead, &root).await;
    let started = tokio::time::Instant::now();
    console_line(&nats, &mock, &dead, "s-otel-dead").await;
    let took = started.elapsed();
    // Long enough for several export attempts to have failed.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let coordinator_log = stop(coordinator).await;
    let worker_log = stop(worker).await;
    for (who, log) in [("coordinator", &coordinator_log), ("worker", &worker_log)] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("OpenTelemetry") || l.contains("opentelemetry"))
            .collect();
        assert_eq!(lines.len(), 1, "{who}: one line about export: {log}");
        assert!(
            lines[0].contains("WARN") && lines[0].contains("cannot export to the OTLP endpoint"),
            "{who}: {}",
            lines[0]
        );
    }
    assert!(
        took < Duration::from_secs(30),
        "the conversation took {took:?}"
    );
}
