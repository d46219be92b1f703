//! A real browser for the web console's tests: Debian's `chromium`, headless,
//! driven over WebDriver by `chromedriver` (one per browser, so every
//! browser has a profile, cookies and tabs of its own), and the real
//! `arbiter-web` binary.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// The browser's binary: `ARBITER_CHROMIUM`, else Debian's.
fn chromium() -> String {
    std::env::var("ARBITER_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A headless chromium and its driver; both stop when it is dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Self {
        let port = free_port();
        let mut driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver runs (Debian's chromium-driver; .ci/run installs it)");
        let profile = tempfile::tempdir().expect("a profile directory");
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,1000",
                    "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }
        });
        let caps = caps
            .as_object()
            .cloned()
            .expect("capabilities are an object");
        let url = format!("http://127.0.0.1:{port}");
        let mut last = String::new();
        for _ in 0..100 {
            match ClientBuilder::rustls()
                .expect("a TLS setup for the WebDriver client")
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Self {
                        client,
                        driver,
                        _profile: profile,
                    };
                }
                Err(e) => last = e.to_string(),
            }
            if let Ok(Some(status)) = driver.try_wait() {
                panic!("chromedriver exited: {status}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver on {url} never started a browser: {last}");
    }

    /// The text of every element `css` selects, in document order.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let Ok(found) = self.client.find_all(Locator::Css(css)).await else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(found.len());
        for element in found {
            out.push(element.text().await.unwrap_or_default());
        }
        out
    }

    /// Waits until `done` holds for the texts `css` selects; returns them.
    pub async fn wait_texts(
        &self,
        css: &str,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let texts = self.texts(css).await;
            if done(&texts) {
                return texts;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; {css} shows:\n{}",
                    texts.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A screenshot of the page, written to `dir/name.png`.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        std::fs::create_dir_all(dir).expect("the screenshot folder");
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot written");
        path
    }

    pub async fn close(self) {
        let Self {
            client, mut driver, ..
        } = self;
        let _ = client.close().await;
        let _ = driver.kill().await;
    }
}

/// The folder the web tests write their screenshots to:
/// `ARBITER_SCREENSHOTS`, else `target/screenshots/web` of the workspace.
pub fn screenshot_dir() -> PathBuf {
    std::env::var_os("ARBITER_SCREENSHOTS").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("screenshots")
                .join("web")
        },
        PathBuf::from,
    )
}

/// A running `arbiter-web`: its address and the URL (with the token) it printed.
pub struct WebConsole {
    pub child: Child,
    /// `http://127.0.0.1:<port>`
    pub base: String,
    /// The sign-in URL it printed once.
    pub sign_in: String,
    pub token: String,
}

impl WebConsole {
    /// Starts `bin` with `env` (its NATS credential) and `args`, and reads
    /// the line it prints with the sign-in URL.
    pub async fn start(
        bin: &Path,
        env: &[(&'static str, std::ffi::OsString)],
        args: &[&str],
        stderr: Stdio,
    ) -> Self {
        let mut command = Command::new(bin);
        for var in [
            "ARBITER_WEB_TOKEN",
            "ARBITER_WEB_TOKEN_FILE",
            "ARBITER_WEB_LISTEN",
            "NATS_CREDS",
            "NATS_CA",
            "NATS_CERT",
            "NATS_KEY",
        ] {
            command.env_remove(var);
        }
        command
            .envs(env.iter().cloned())
            .args(["--listen", "127.0.0.1:0", "--linger-secs", "1"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        let mut child = command.spawn().expect("arbiter-web starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("arbiter-web prints its URL within 20 s")
            .expect("its stdout")
            .expect("a line");
        let sign_in = line
            .strip_prefix("arbiter-web: open ")
            .unwrap_or_else(|| panic!("the first line is the URL: {line:?}"))
            .to_owned();
        let (base, token) = sign_in
            .split_once("/?token=")
            .map(|(b, t)| (b.to_owned(), t.to_owned()))
            .unwrap_or_else(|| panic!("the URL carries the token: {sign_in}"));
        Self {
            child,
            base,
            sign_in,
            token,
        }
    }
}
