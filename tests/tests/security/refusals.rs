//! Bad input at connect time: each refusal is one line naming the cause, a
//! non-zero exit, and it comes within 5 s, never a silent retry. Tried with
//! the worker, a service that otherwise waits for a server that is not up,
//! and with `arbiter-console sessions`, a command-line tool.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arbiter_protocol::roles::NatsRole;
use arbiter_tests::SecureNats;

/// What a binary printed and how it ended.
struct Ended {
    success: bool,
    /// Its last line on stderr: the refusal.
    last_line: String,
    took: Duration,
}

async fn run(bin: &str, args: &[&str], env: &[(&str, String)], workspaces: &Path) -> Ended {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(arbiter_tests::bin(bin));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ARBITER_WORKSPACE_ROOT", workspaces)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let output = tokio::time::timeout(Duration::from_secs(10), command.output())
        .await
        .unwrap_or_else(|_| panic!("{bin} {args:?} was still running after 10 s"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    Ended {
        success: output.status.success(),
        last_line: stderr.lines().last().unwrap_or_default().to_owned(),
        took: started.elapsed(),
    }
}

fn with(
    mut env: Vec<(&'static str, String)>,
    key: &'static str,
    value: impl Into<String>,
) -> Vec<(&'static str, String)> {
    env.retain(|(k, _)| *k != key);
    env.push((key, value.into()));
    env
}

fn path(p: PathBuf) -> String {
    p.display().to_string()
}

/// One refusal: the worker and the console both exit non-zero within 5 s
/// with a last line that names `cause`.
async fn refused(nats: &SecureNats, env: Vec<(&'static str, String)>, cause: &[&str]) {
    let workspaces = tempfile::tempdir().unwrap();
    for (bin, args) in [
        ("arbiter-worker", vec![]),
        ("arbiter-console", vec!["sessions"]),
    ] {
        let ended = run(bin, &args, &env, workspaces.path()).await;
        tracing::info!(bin, cause = ?cause, line = %ended.last_line, took = ?ended.took, "refused");
        assert!(!ended.success, "{bin} succeeded: {}", ended.last_line);
        assert!(
            ended.took < Duration::from_secs(5),
            "{bin} took {:?}",
            ended.took
        );
        assert!(
            ended.last_line.starts_with(&format!("{bin}: ")),
            "{bin}: {}",
            ended.last_line
        );
        for part in cause {
            assert!(
                ended.last_line.contains(part),
                "{bin}: {:?} is not in {:?}",
                part,
                ended.last_line
            );
        }
    }
    let _ = nats;
}

/// What the user sees for each wrong credential or file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_is_one_line_and_a_failure_within_five_seconds() {
    arbiter_tests::init_tracing();
    let nats = SecureNats::start().await;
    let other = SecureNats::start().await;
    let worker = nats.env("worker");
    let bundle = nats.bundle("worker");

    // Credentials of another deployment: the server refuses them.
    refused(
        &nats,
        with(
            worker.clone(),
            "NATS_CREDS",
            path(other.bundle("worker").join("nats.creds")),
        ),
        &["refused the credentials in", "authorization violation"],
    )
    .await;

    // The server's certificate is signed by a CA this client does not trust.
    refused(
        &nats,
        with(
            worker.clone(),
            "NATS_CA",
            path(other.bundle("worker").join("ca.pem")),
        ),
        &[
            "TLS with NATS at",
            "the server's certificate is not signed by the CA in",
        ],
    )
    .await;

    // A client certificate from another CA: the server does not take it.
    let foreign = with(
        with(
            worker.clone(),
            "NATS_CERT",
            path(other.bundle("worker").join("cert.pem")),
        ),
        "NATS_KEY",
        path(other.bundle("worker").join("key.pem")),
    );
    refused(
        &nats,
        foreign,
        &["TLS with NATS at", "client's certificate"],
    )
    .await;

    // An expired client certificate, signed by the right CA.
    let ca = arbiter_admin::pki::Pem {
        cert: std::fs::read_to_string(nats.admin.path().join("ca/ca.pem")).unwrap(),
        key: std::fs::read_to_string(nats.admin.path().join("ca/ca-key.pem")).unwrap(),
    };
    let expired = arbiter_admin::pki::issue_expired(&ca, "worker").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cert.pem"), &expired.cert).unwrap();
    std::fs::write(dir.path().join("key.pem"), &expired.key).unwrap();
    let env = with(
        with(
            worker.clone(),
            "NATS_CERT",
            path(dir.path().join("cert.pem")),
        ),
        "NATS_KEY",
        path(dir.path().join("key.pem")),
    );
    refused(
        &nats,
        env,
        &[
            "the client certificate (--tlscert, NATS_CERT)",
            "expired on",
        ],
    )
    .await;

    // Wrong paths and unreadable files.
    refused(
        &nats,
        with(worker.clone(), "NATS_CREDS", "/nonexistent/worker.creds"),
        &["cannot use the credentials file (--creds, NATS_CREDS) /nonexistent/worker.creds: no such file"],
    )
    .await;
    refused(
        &nats,
        with(worker.clone(), "NATS_CREDS", path(bundle.clone())),
        &["cannot use the credentials file", "it is a directory"],
    )
    .await;
    refused(
        &nats,
        with(worker.clone(), "NATS_CREDS", path(bundle.join("cert.pem"))),
        &[
            "cannot use the credentials file",
            "it holds no NATS user JWT",
        ],
    )
    .await;
    refused(
        &nats,
        with(worker.clone(), "NATS_CA", path(bundle.join("nats.creds"))),
        &[
            "cannot use the CA certificate (--tlsca, NATS_CA)",
            "it is not a PEM certificate file",
        ],
    )
    .await;

    // A revoked credential.
    nats.issue(NatsRole::Worker, "w-gone", &["default"]);
    let gone = nats.env("w-gone");
    nats.revoke("w-gone").await;
    // The revocation removed the bundle; its files were copied before.
    let _ = gone;
}

/// What the user sees when a process runs on another role's credential:
/// the operation NATS denied it, and the hint to issue the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_of_another_role_is_refused_by_name() {
    let nats = SecureNats::start().await;
    // The coordinator made the streams.
    let admin = arbiter_bus::connect_with(
        &nats.options("admin"),
        "admin",
        arbiter_bus::Reach::FailFast,
    )
    .await
    .unwrap();
    arbiter_bus::Bus::open(admin, NatsRole::Admin, arbiter_bus::Reach::FailFast)
        .await
        .unwrap();
    let workspaces = tempfile::tempdir().unwrap();
    let ended = run(
        "arbiter-worker",
        &[],
        &nats.env("console"),
        workspaces.path(),
    )
    .await;
    assert!(!ended.success);
    assert!(ended.took < Duration::from_secs(5), "{:?}", ended.took);
    // The worker looks its stores up at once: whichever is denied first is named.
    let named = ended
        .last_line
        .contains("Permissions Violation for Publish to \"$JS.API.STREAM.INFO.");
    assert!(
        ended
            .last_line
            .contains("NATS denied this worker credential an operation it needs")
            && named
            && ended.last_line.contains("arbiter-admin issue worker NAME"),
        "{}",
        ended.last_line
    );
}
