//! Webhooks end to end, over a real nats-server and the real coordinator
//! binary: a local HTTP receiver checks each POST's Standard Webhooks
//! signature and records the event ids. It gets `needs_input` (a tool call
//! waiting for approval), `completed`, `failed` and `budget` events, each
//! once by id, across a kill -9 of the coordinator;
//! a receiver that answers 500 twice gets the event on the third try; and a
//! receiver that never answers holds no session up. Which steps emit which
//! events is decided by the coordinator's core, in its table tests
//! (coordinator/src/rules/tests/notify.rs).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbiter_protocol::LogBody;
use arbiter_tests::{Gate, eventually};
use common::*;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The hooks' secret, in the `whsec_` form (base64 of the key).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How the receiver answers.
#[derive(Clone, Copy)]
enum Answer {
    Ok,
    /// 500 to the first `n` tries of each event, then 200.
    FailFirst(usize),
    /// Never: the request is held open.
    Hang,
}

/// One POST as the receiver saw it.
#[derive(Debug, Clone)]
struct Post {
    id: String,
    kind: String,
    session: String,
    summary: String,
    /// The signature checked out, the id header matched the body's and the
    /// timestamp is within five minutes.
    valid: bool,
    at: Instant,
}

#[derive(Clone)]
struct Receiver {
    url: String,
    posts: Arc<Mutex<Vec<Post>>>,
}

impl Receiver {
    async fn start(answer: Answer) -> Self {
        let posts: Arc<Mutex<Vec<Post>>> = Arc::default();
        let state = (posts.clone(), answer);
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, posts }
    }

    fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    /// Waits until `n` distinct events have come.
    async fn wait_ids(&self, n: usize) -> Vec<Post> {
        eventually(WAIT, &format!("{n} webhook events"), || async {
            let posts = self.posts();
            (distinct(&posts).len() >= n).then_some(posts)
        })
        .await
    }
}

fn distinct(posts: &[Post]) -> Vec<String> {
    let mut ids: Vec<String> = posts.iter().map(|p| p.id.clone()).collect();
    ids.sort();
    ids.dedup();
    ids
}

async fn receive(
    axum::extract::State((posts, answer)): axum::extract::State<(Arc<Mutex<Vec<Post>>>, Answer)>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (id, timestamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let key = data_encoding::BASE64
        .decode(SECRET.trim_start_matches("whsec_").as_bytes())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&body);
    let expected = format!(
        "v1,{}",
        data_encoding::BASE64.encode(&mac.finalize().into_bytes())
    );
    let fresh = timestamp
        .parse::<i64>()
        .is_ok_and(|t| (chrono::Utc::now().timestamp() - t).abs() < 300);
    let post = Post {
        valid: signature == expected && event["id"] == id.as_str() && fresh,
        kind: event["type"].as_str().unwrap_or_default().to_owned(),
        session: event["session_id"].as_str().unwrap_or_default().to_owned(),
        summary: event["summary"].as_str().unwrap_or_default().to_owned(),
        id,
        at: Instant::now(),
    };
    let tries = {
        let mut posts = posts.lock().unwrap();
        posts.push(post.clone());
        posts.iter().filter(|p| p.id == post.id).count()
    };
    match answer {
        Answer::Ok => axum::http::StatusCode::NO_CONTENT,
        Answer::FailFirst(n) if tries <= n => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        Answer::FailFirst(_) => axum::http::StatusCode::OK,
        Answer::Hang => std::future::pending().await,
    }
}

fn config_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("arbiter.toml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

fn hook_file(url: &str, extra: &str) -> String {
    format!("{extra}\n[[hooks]]\nname = \"phone\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n")
}

/// The coordinator's config with the receiver's hook.
fn hooked_config(sys: &System, url: &str) -> arbiter_coordinator::Config {
    let secret = arbiter_coordinator::notify::Secret::parse(SECRET).unwrap();
    let hook = arbiter_coordinator::notify::Hook::new("phone", url, secret).unwrap();
    arbiter_coordinator::Config {
        hooks: vec![hook],
        intent_retries: 0,
        ..sys.coordinator_config()
    }
}

/// `needs_input`, `completed`, `failed` and `budget` reach the receiver signed, each once
/// by id, and the coordinator's kill -9 in the middle loses none and
/// sends none twice (a restored session stores its events again under the
/// same ids, which the server drops as duplicates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_a_receiver_signed_once_each_across_a_coordinator_kill() {
    let receiver = Receiver::start(Answer::Ok).await;
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    // The worker asks before any push.
    let mut worker = sys.worker_config("worker-0", 4, 200_000);
    worker.policy = arbiter_protocol::Policy::parse("ask bash(git push*)").unwrap();
    sys.spawn_worker_with(worker);
    let (_dir, file) = config_file(&hook_file(
        &receiver.url,
        "[budget.session]\ntokens = 10000\n",
    ));
    let env = [
        ("ARBITER_CONFIG", file.as_os_str()),
        ("ARBITER_INTENT_RETRIES", std::ffi::OsStr::new("0")),
    ];
    let mut coordinator = sys.coordinator_process_with(&env);

    // failed: an intent that cannot be carried out, no retries.
    let failed = "s-hook-failed";
    sys.mock.push(
        &arbiter_lane("Tell the builder to hurry"),
        arbiter("address_orchestrator", "Hurry."),
    );
    sys.send(failed, "Tell the builder to hurry").await;

    // budget: the report takes the session past 80 % and past its cap.
    let budget = "s-hook-budget";
    let (arb, brief) = (arbiter_lane("Spend it"), "Brief: spend it.");
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", brief).usage(900, 100, 0, 0),
    );
    sys.mock.push(
        &orch_lane(brief),
        orch(true, "Spent.").usage(11_400, 100, 0, 0),
    );
    sys.send(budget, "Spend it").await;

    // needs_input: an Orchestrator's push waits for the human.
    let asks = "s-hook-asks";
    let (arb, brief) = (arbiter_lane("Push it"), "Brief: push it.");
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(
        &orch_lane(brief),
        arbiter_tests::MockReply::tool_use(
            "bash",
            serde_json::json!({"command": "git push origin main"}),
        ),
    );
    sys.send(asks, "Push it").await;
    let before = receiver.wait_ids(4).await;

    // completed: the Arbiter's release turn is in flight when the
    // coordinator is killed; the restored session runs it again.
    let done = "s-hook-done";
    let log = sys.watch_log(done).await;
    let (arb, brief) = (arbiter_lane("Build it"), "Brief: build it.");
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&orch_lane(brief), orch(true, "Built."));
    let never = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "LOST").gated(never.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is built."));
    sys.send(done, "Build it").await;
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let _coordinator = sys.coordinator_process_with(&env);
    log.wait_for(
        "the release's words",
        |b| matches!(b, LogBody::Arbiter(e) if e.text == "It is built."),
    )
    .await;
    let posts = receiver.wait_ids(5).await;
    never.open();
    // Nothing more comes: no event twice, no stray one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let posts = {
        let now = receiver.posts();
        assert!(now.len() >= posts.len());
        now
    };
    let mut seen: Vec<(String, String)> = posts
        .iter()
        .map(|p| (p.session.clone(), p.kind.clone()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (asks.to_owned(), "needs_input".to_owned()),
            (budget.to_owned(), "budget".to_owned()),
            (budget.to_owned(), "budget".to_owned()),
            (done.to_owned(), "completed".to_owned()),
            (failed.to_owned(), "failed".to_owned()),
        ],
        "{posts:#?}"
    );
    assert_eq!(
        distinct(&posts).len(),
        posts.len(),
        "an event twice: {posts:#?}"
    );
    assert!(posts.iter().all(|p| p.valid), "{posts:#?}");
    assert!(before.iter().all(|p| p.valid));
    let asked = posts.iter().find(|p| p.kind == "needs_input").unwrap();
    assert_eq!(
        asked.summary, "Orchestrator I asks to run bash: git push origin main",
        "{asked:?}"
    );
    let completed = posts.iter().find(|p| p.kind == "completed").unwrap();
    assert!(completed.summary.contains("It is built."), "{completed:?}");
    assert!(!completed.summary.contains("LOST"));
    let budgets: Vec<&str> = posts
        .iter()
        .filter(|p| p.kind == "budget")
        .map(|p| p.summary.as_str())
        .collect();
    assert!(
        budgets
            .iter()
            .any(|s| s.starts_with("This session has used 125 %"))
            && budgets
                .iter()
                .any(|s| s.starts_with("Held at the budget cap")),
        "{budgets:?}"
    );
}

/// A receiver that answers 500 to the first two tries gets the event on the
/// third, about 1 s and 2 s later (the doubling wait), signed each time,
/// and no fourth try comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_fails_twice_gets_the_event_on_the_third_try() {
    let receiver = Receiver::start(Answer::FailFirst(2)).await;
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let config = hooked_config(&sys, &receiver.url);
    sys.spawn_coordinator_with(config);
    sys.mock.push(
        &arbiter_lane("Tell the builder to hurry"),
        arbiter("address_orchestrator", "Hurry."),
    );
    sys.send("s-hook-retry", "Tell the builder to hurry").await;
    let posts = eventually(WAIT, "three tries", || async {
        let posts = receiver.posts();
        (posts.len() >= 3).then_some(posts)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let posts_after = receiver.posts();
    assert_eq!(posts_after.len(), 3, "{posts_after:#?}");
    assert_eq!(distinct(&posts).len(), 1);
    assert!(posts.iter().all(|p| p.valid && p.kind == "failed"));
    let gaps: Vec<f64> = posts
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs_f64())
        .collect();
    assert!(
        gaps[0] >= 0.9 && gaps[1] >= 1.9 && gaps[1] < 10.0,
        "waits between tries: {gaps:?}"
    );
}

/// Rounds of a human line and the Arbiter's answer (an intent refused,
/// which is a `failed` event for the hooks), timed from the send to the
/// entry on the log; the medians in ms.
async fn reply_times(sys: &System, session: &str, rounds: usize) -> Vec<u128> {
    let log = sys.watch_log(session).await;
    let arb = arbiter_lane("round 0");
    for _ in 0..rounds {
        sys.mock
            .push(&arb, arbiter("address_orchestrator", "Hurry."));
    }
    let mut times = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        sys.send(session, &format!("round {round}")).await;
        eventually(WAIT, "the refusal", || async {
            let errors = log
                .bodies()
                .iter()
                .filter(|b| matches!(b, LogBody::Error(_)))
                .count();
            (errors > round).then_some(())
        })
        .await;
        times.push(started.elapsed().as_millis());
    }
    times.sort();
    times
}

/// A receiver that never answers delays no session: the same rounds take
/// as long with it configured as without any hook (within a generous
/// margin), while its POSTs hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_receiver_delays_no_session() {
    const ROUNDS: usize = 6;
    let mut plain = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    // The same settings, no hook.
    let config = arbiter_coordinator::Config {
        intent_retries: 0,
        ..plain.coordinator_config()
    };
    plain.spawn_coordinator_with(config);
    let without = reply_times(&plain, "s-plain", ROUNDS).await;
    drop(plain);

    let receiver = Receiver::start(Answer::Hang).await;
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let config = hooked_config(&sys, &receiver.url);
    sys.spawn_coordinator_with(config);
    let with = reply_times(&sys, "s-hung", ROUNDS).await;
    // The events did go out, and hang there.
    let posts = receiver.wait_ids(ROUNDS).await;
    assert!(posts.iter().all(|p| p.valid));
    let median = |t: &[u128]| t[t.len() / 2];
    eprintln!(
        "human line to reply, ms (sorted): without hooks {without:?}, with a hung receiver {with:?}"
    );
    assert!(
        median(&with) <= median(&without) + 500 && with[ROUNDS - 1] < 5_000,
        "without hooks {without:?}, with a hung receiver {with:?}"
    );
}

/// The Arbiter's words to the human are `needs_input` only when no console
/// follows the session: sent from the test alone (nobody watching), the
/// receiver gets one, quoting them; typed in a real `arbiter-console` that
/// follows the session, it gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arbiters_words_are_needs_input_only_when_no_console_follows() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let receiver = Receiver::start(Answer::Ok).await;
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let config = hooked_config(&sys, &receiver.url);
    sys.spawn_coordinator_with(config);

    let alone = "s-hook-alone";
    sys.mock.push(
        &arbiter_lane("Which one?"),
        arbiter("address_human", "Which database?"),
    );
    sys.send(alone, "Which one?").await;
    let posts = receiver.wait_ids(1).await;
    assert_eq!(
        (posts[0].session.as_str(), posts[0].kind.as_str()),
        (alone, "needs_input")
    );
    assert_eq!(
        posts[0].summary,
        "The Arbiter wrote to you while no console was open on the session: Which database?"
    );
    assert!(posts[0].valid);

    let watched = "s-hook-watched";
    sys.mock.push(
        &arbiter_lane("Hello there"),
        arbiter("address_human", "Hello."),
    );
    let mut console = tokio::process::Command::new(arbiter_tests::bin("arbiter-console"))
        .env_clear()
        .envs(sys.nats_env("console"))
        .args(["--plain", "--session", watched])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(process_log("console-watched"))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = console.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(console.stdout.take().unwrap()).lines();
    stdin.write_all(b"Hello there\n").await.unwrap();
    tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("Hello.") {
                return;
            }
        }
        panic!("the console ended before the reply");
    })
    .await
    .expect("the reply in the console");
    // The question (2 s at most) and a delivery would have come by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let posts = receiver.posts();
    assert!(
        posts.iter().all(|p| p.session != watched),
        "an event for a watched session: {posts:#?}"
    );
    drop(stdin);
}
