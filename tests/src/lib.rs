//! Test support for Arbiter's end-to-end tests: a real `nats-server` per test, mock
//! Anthropic Messages and OpenAI Chat Completions servers, tracing setup and a
//! polling helper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod cluster;
pub mod mock_llm;
pub mod mock_openai;
pub mod mock_server;
pub mod nats;
pub mod netns;
pub mod otlp;
pub mod secure;

use std::future::Future;
use std::time::Duration;

pub use browser::{Browser, WebConsole};
pub use cluster::SecureCluster;
pub use mock_llm::{MockAnthropic, MockReply, MockUsage};
pub use mock_openai::{ChatRequestExt, MockOpenAi, OpenAiReply, ResponsesRequestExt, Semantics};
pub use mock_server::{Gate, MockServer, RecordedRequest, first_words};
pub use nats::NatsServer;
pub use netns::NetNs;
pub use otlp::OtlpReceiver;
pub use secure::SecureNats;

/// How often [`eventually`] polls.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Installs a `tracing` fmt subscriber that writes through the test harness (so output
/// is shown only for failing tests), filtered by `RUST_LOG` (default
/// `warn,arbiter=info`). Safe to call from every test.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,arbiter=info"));
    // Fails only when a global subscriber is already set, which is fine.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Polls `f` every 20 ms until it returns `Some`, and returns that value.
///
/// Panics with `what` if `timeout` passes first. `f` is always tried at least once.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The path of a workspace binary (`arbiter-coordinator`, …), built next to
/// the running test. `cargo test --workspace` builds them: each binary crate
/// has integration tests of its own.
pub fn bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace --bins` or `cargo test --workspace`",
        path.display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::eventually;
    use std::time::Duration;

    #[tokio::test]
    async fn eventually_returns_the_first_some() {
        init();
        let mut n = 0;
        let got = eventually(Duration::from_secs(1), "n reaches 3", || {
            n += 1;
            let v = n;
            async move { (v >= 3).then_some(v) }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 50ms waiting for: never")]
    async fn eventually_panics_with_what() {
        eventually(Duration::from_millis(50), "never", || async { None::<()> }).await;
    }

    fn init() {
        super::init_tracing();
        super::init_tracing();
    }
}
