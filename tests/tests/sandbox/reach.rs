//! What an Orchestrator's `bash` can reach in each way README.md and
//! docs/deployment.md start a worker (issue #38): `scripts/up`, the by-hand
//! commands, a worker given its bundle by flags, and one given it by
//! environment, each with the deployment directory beside the workspaces,
//! outside `/tmp` and outside
//! the worker's `$HOME` (so that neither private directory hides it by
//! accident). A scripted model has `bash` try to read every file of the
//! deployment directory and every credential the worker holds, look for
//! any nkey seed anywhere the sandbox shows, list `/`, and speak to NATS
//! with what it found. docs/security.md ("What an Orchestrator can reach")
//! and docs/tools.md ("Sandbox") say what these tests check.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arbiter_bus::{Bus, NatsOptions, Reach, TraceContext};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{HumanMessage, VERSION, subjects};
use arbiter_tests::{MockAnthropic, MockReply, eventually};
use serde_json::json;

use crate::common::*;
use crate::direct::{Watch, publish_summons, tool_results, worker_ready};

/// What `/` may hold in the sandbox, as docs/tools.md lists it: the system
/// directories, `/dev`, `/proc`, the private `/tmp` and `/var/tmp`, and the
/// mount points of `HOME`, the toolchain directories and the workspace.
const TOP_DOCUMENTED: [&str; 13] = [
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "sys", "nix", "dev", "proc",
    "tmp",
];

/// A directory for one start's files: beside the test's build tree, so in
/// the checkout, never under `/tmp`.
fn checkout_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("reach-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The probe `bash` runs: reads each of `files`, greps every tree the
/// sandbox shows (but the package manager's `/usr` and its links, `/proc`,
/// `/sys`, `/dev` and the toolchains in `HOME`) for an nkey seed, lists `/`, and speaks plain NATS, with no credential,
/// to the server on `port`.
fn probe(files: &[PathBuf], port: u16) -> String {
    let mut line = String::new();
    for file in files {
        let f = file.display();
        line.push_str(&format!(
            "if cat '{f}' >/dev/null 2>&1; then echo 'READ {f}'; else echo 'DENIED {f}'; fi; "
        ));
    }
    line.push_str(
        "for d in /* /var/* ~/.[!.]* ~/*; do case $d in \
         /usr|/bin|/sbin|/lib|/lib32|/lib64|/libx32|/nix|/proc|/sys|/dev|/var) ;; \
         *) grep -rlsIEw --exclude-dir=.rustup --exclude-dir=.pyenv 'S[OAU][A-Z2-7]{56}' \"$d\";; \
         esac; done | sed 's/^/SEED /'; ",
    );
    line.push_str("echo \"TOP $(ls -A / | tr '\\n' ' ')\"; ");
    line.push_str(&format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && read -r -t 5 info <&3; echo \"INFO $info\"; \
         printf 'CONNECT {{\"verbose\":true}}\\r\\nPING\\r\\n' >&3; read -r -t 5 reply <&3; \
         echo \"REPLY $? $reply\""
    ));
    line
}

/// What the probe found, and the checks every start must pass.
fn assert_reached_nothing(start: &str, out: &str, files: &[PathBuf], extra_top: &[&str]) {
    let read: Vec<&str> = out.lines().filter(|l| l.starts_with("READ ")).collect();
    assert!(read.is_empty(), "{start}: bash read {read:?}\n{out}");
    let denied = out.lines().filter(|l| l.starts_with("DENIED ")).count();
    assert_eq!(denied, files.len(), "{start}: {out}");
    let seeds: Vec<&str> = out.lines().filter(|l| l.starts_with("SEED ")).collect();
    assert!(
        seeds.is_empty(),
        "{start}: an nkey seed is readable: {seeds:?}"
    );
    let top = out
        .lines()
        .find_map(|l| l.strip_prefix("TOP "))
        .unwrap_or_else(|| panic!("{start}: no listing of /: {out}"));
    for name in top.split_whitespace() {
        assert!(
            TOP_DOCUMENTED.contains(&name) || extra_top.contains(&name),
            "{start}: /{name} is shown, which docs/tools.md does not list: {top}"
        );
    }
    // The network is shared: the server answers, and wants TLS and a
    // credential, of which the sandbox has none.
    let info = out
        .lines()
        .find_map(|l| l.strip_prefix("INFO "))
        .unwrap_or_default();
    assert!(
        info.contains("\"tls_required\":true") && info.contains("\"auth_required\":true"),
        "{start}: {out}"
    );
    let reply = out
        .lines()
        .find_map(|l| l.strip_prefix("REPLY "))
        .unwrap_or_default();
    // It waits for a TLS handshake: a plain CONNECT gets an -ERR or the
    // connection closed (`read` fails, status 1), never `+OK` or `PONG`.
    assert!(
        reply.starts_with("1") || reply.contains("-ERR"),
        "{start}: the server took a plain, anonymous client: {out}"
    );
    assert!(
        !reply.contains("PONG") && !reply.contains("+OK"),
        "{start}: {out}"
    );
}

/// The top-level names of `paths` (what their mount points add to `/`).
fn tops(paths: &[&Path]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.components().nth(1))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect()
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// The variables an `env` file of `arbiter-admin` sets, as `set -a; . env` would.
fn env_file(path: &Path) -> Vec<(String, OsString)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), OsString::from(v.trim_matches('\''))))
        .collect()
}

/// What the user sees: under `scripts/up`, run as README.md says with its
/// state in a directory beside the checkout's build tree, an Orchestrator's
/// `bash` reads none of `.arbiter/secrets` (admin keys, CA, every role's
/// bundle, its own included), finds no nkey seed anywhere it can see, and
/// the NATS server it can reach refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_scripts_up_bash_reads_no_secret_of_the_deployment() {
    let dir = checkout_dir();
    let state = dir.path().join("state");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mock = MockAnthropic::start().await;
    mock.set_lane_fn(lane_of);
    let real_home = std::env::var_os("HOME").map(PathBuf::from).unwrap();
    let cargo_home = std::env::var_os("CARGO_HOME").unwrap_or(real_home.join(".cargo").into());
    let rustup_home = std::env::var_os("RUSTUP_HOME").unwrap_or(real_home.join(".rustup").into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut up = tokio::process::Command::new(root.join("scripts/up"));
    up.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CARGO_HOME", cargo_home)
        .env("RUSTUP_HOME", rustup_home)
        .env("ARBITER_STATE_DIR", &state)
        .env("ARBITER_NATS_PORT", port.to_string())
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ARBITER_MODEL", format!("anthropic:{ARBITER_MODEL}"))
        .env("ORCHESTRATOR_MODEL", format!("anthropic:{ORCH_MODEL}"))
        .env("SUBAGENT_MODEL", format!("anthropic:{SUB_MODEL}"))
        .stdin(std::process::Stdio::null())
        .stdout(process_log("scripts-up"))
        .stderr(process_log("scripts-up"))
        .process_group(0)
        .kill_on_drop(true);
    if let Some(path) = std::env::var_os("NATS_SERVER_BIN") {
        // scripts/install-nats-server takes a nats-server on PATH first.
        let bin_dir = dir.path().join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        std::os::unix::fs::symlink(path, bin_dir.join("nats-server")).unwrap();
        let mut paths = vec![bin_dir];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        up.env("PATH", std::env::join_paths(paths).unwrap());
    }
    let child = up.spawn().unwrap();
    let _stop = StopGroup(child.id().unwrap() as i32, child);

    let bundle = state.join("secrets/creds/console");
    let options = NatsOptions {
        creds: Some(bundle.join("nats.creds")),
        tls_ca: Some(bundle.join("ca.pem")),
        tls_cert: Some(bundle.join("cert.pem")),
        tls_key: Some(bundle.join("key.pem")),
        ..NatsOptions::url(format!("tls://127.0.0.1:{port}"))
    };
    // scripts/up builds (a no-op after scripts/test's build), makes the
    // credentials and starts the server, the coordinator and the worker.
    let console = eventually(Duration::from_secs(120), "scripts/up to be up", || async {
        let conn = arbiter_bus::connect_with(&options, "test-console", Reach::FailFast)
            .await
            .ok()?;
        Bus::open(conn, NatsRole::Console, Reach::FailFast)
            .await
            .ok()
    })
    .await;
    let secrets = files_under(&state.join("secrets"));
    assert!(secrets.len() > 20, "{secrets:?}");
    let brief = "Probe the sandbox of scripts/up.";
    let first = "Look around for keys.";
    mock.push(&arbiter_lane(first), summons(brief, json!({})));
    mock.push(&arbiter_lane(first), arbiter("address_human", "Done."));
    mock.push(
        &orch_lane(brief),
        MockReply::tool_use("bash", json!({ "command": probe(&secrets, port) })),
    );
    mock.push(&orch_lane(brief), orch(false, "Nothing found."));
    let session = "s-up";
    let message_id = uuid::Uuid::now_v7().to_string();
    let message = HumanMessage {
        v: VERSION,
        session_id: session.to_owned(),
        message_id: message_id.clone(),
        text: first.to_owned(),
        sent_at: chrono::Utc::now(),
        command: None,
        budget: None,
        workspace: None,
        approval: None,
        policy: None,
        rewind: None,
    };
    console
        .publish_js(
            subjects::session_human_from(session, "console"),
            &message_id,
            &TraceContext::none(),
            &message,
        )
        .await
        .unwrap();
    let request = eventually(Duration::from_secs(60), "the probe's result", || async {
        mock.requests_for(&orch_lane(brief)).get(1).cloned()
    })
    .await;
    let (out, _) = tool_results(&request).remove(0);
    let workspaces = state.join("workspaces");
    let mut extra = tops(&[&home, &workspaces]);
    extra.extend(toolchain_tops());
    let mut extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    extra.extend(["var", "run"]);
    assert_reached_nothing("scripts/up", &out, &secrets, &extra);
}

/// Ends a process group (scripts/up and everything it started) when dropped.
struct StopGroup(i32, tokio::process::Child);

impl Drop for StopGroup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", "--", &format!("-{}", self.0)])
            .status();
        std::thread::sleep(Duration::from_millis(500));
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .status();
        let _ = self.1.start_kill();
    }
}

/// The top-level names of the `PATH` directories and `RUSTUP_HOME`: the
/// toolchain's mount points.
fn toolchain_tops() -> Vec<String> {
    let mut paths: Vec<PathBuf> =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect();
    paths.extend(std::env::var_os("RUSTUP_HOME").map(PathBuf::from));
    let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    tops(&refs)
}

/// How a worker is given its bundle.
#[derive(Debug, Clone, Copy)]
enum Given {
    /// docs/deployment.md, "Running the binaries by hand":
    /// `set -a; . secrets/creds/worker/env`, `--workspace-root ./workspaces`.
    EnvFile,
    /// Flags (`--creds … --tlskey …`), the bundle copied beside the workspaces.
    Flags,
    /// `NATS_CREDS`, `NATS_CA`, `NATS_CERT`, `NATS_KEY`, as on another host.
    Environment,
}

/// What the user sees: started by hand, by flags or by environment, with
/// `secrets/` beside `workspaces/`, a worker's `bash` reads no file of the
/// deployment and none of its own credential, finds no nkey seed, and
/// NATS refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_hand_by_flags_or_by_environment_bash_reads_no_secret_of_the_deployment() {
    let checkout = checkout_dir();
    let sys = System::start_with(Options {
        secure: true,
        coordinator: false,
        workers: 0,
        admin_in: Some(checkout.path().to_owned()),
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let admin = sys.admin.as_ref().unwrap().path().to_owned();
    let workspaces = checkout.path().join("workspaces");
    let home = checkout.path().join("home");
    for dir in [&workspaces, &home] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let port = port_of(sys.nats.url());
    // Summonses are the coordinator's to publish (the test looks on as the admin).
    let conn = arbiter_bus::connect_with(
        &sys.nats_options("coordinator"),
        "test-coordinator",
        Reach::FailFast,
    )
    .await
    .unwrap();
    let coordinator = Bus::open(conn, NatsRole::Coordinator, Reach::FailFast)
        .await
        .unwrap();
    for (n, given) in [Given::EnvFile, Given::Flags, Given::Environment]
        .into_iter()
        .enumerate()
    {
        let id = format!("worker-{given:?}").to_lowercase();
        let own = match given {
            Given::Flags => {
                let copy = checkout.path().join("gpu-1");
                std::fs::create_dir_all(&copy).unwrap();
                for file in ["nats.creds", "ca.pem", "cert.pem", "key.pem"] {
                    std::fs::copy(admin.join("creds/worker").join(file), copy.join(file)).unwrap();
                }
                copy
            }
            _ => admin.join("creds/worker"),
        };
        let mut command = sys.worker_command(None, &id, 1, &[("HOME", home.as_os_str())]);
        command.env("ARBITER_WORKSPACE_ROOT", &workspaces);
        for name in ["NATS_CREDS", "NATS_CA", "NATS_CERT", "NATS_KEY"] {
            command.env_remove(name);
        }
        match given {
            Given::EnvFile => {
                command.current_dir(checkout.path());
                command.env("ARBITER_WORKSPACE_ROOT", "./workspaces");
                for (k, v) in env_file(&admin.join("creds/worker/env")) {
                    if k != "NATS_URL" {
                        command.env(k, v);
                    }
                }
            }
            Given::Flags => {
                command.arg("--creds").arg(own.join("nats.creds"));
                command.arg("--tlsca").arg(own.join("ca.pem"));
                command.arg("--tlscert").arg(own.join("cert.pem"));
                command.arg("--tlskey").arg(own.join("key.pem"));
            }
            Given::Environment => {
                for (k, file) in [
                    ("NATS_CREDS", "nats.creds"),
                    ("NATS_CA", "ca.pem"),
                    ("NATS_CERT", "cert.pem"),
                    ("NATS_KEY", "key.pem"),
                ] {
                    command.env(k, own.join(file));
                }
            }
        }
        let mut worker = command.spawn().unwrap();
        worker_ready(&sys, &id).await;
        let mut files = files_under(&admin);
        files.extend(files_under(&own));
        files.sort();
        files.dedup();
        let brief = format!("Probe the sandbox, {given:?}.");
        let lane = orch_lane(&brief);
        sys.mock.push(
            &lane,
            MockReply::tool_use("bash", json!({ "command": probe(&files, port) })),
        );
        sys.mock.push(&lane, orch(true, "Nothing found."));
        let (session, orch_id) = (format!("s-reach-{n}"), format!("o-reach-{n}"));
        publish_summons(
            &coordinator,
            "default",
            &session,
            &orch_id,
            &brief,
            None,
            &orch_id,
        )
        .await;
        watch.wait_output(&orch_id, 1).await;
        let (out, _) = tool_results(&sys.mock.requests_for(&lane)[1]).remove(0);
        let mut extra = tops(&[&home, &workspaces]);
        extra.extend(toolchain_tops());
        let mut extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        extra.extend(["var", "run"]);
        assert_reached_nothing(&format!("{given:?}"), &out, &files, &extra);
        worker.start_kill().unwrap();
        worker.wait().await.unwrap();
    }
}
