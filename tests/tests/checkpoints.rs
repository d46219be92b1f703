//! Checkpoints end to end (issue #44, first step): a session whose workspace
//! is a real git repository gets a commit of the workspace after each output
//! that changed it, on `refs/arbiter/<session>/checkpoints`, the human's
//! dirty state first; each checkpoint's diff is exactly what its
//! Orchestrator wrote; the user's HEAD, index and branches are untouched;
//! what `.gitignore` ignores and a file over the cap stay out, and the log
//! says so; a workspace that is not a repository says why it has none.

use crate::common;
use crate::direct;

use std::path::Path;

use arbiter_protocol::LogBody;
use arbiter_tests::MockReply;
use common::*;
use direct::*;
use serde_json::json;

/// A repository with one commit on `main`, a second branch, and what the
/// human left: a changed file and an untracked one.
fn repo(ws: &Path) {
    std::fs::create_dir_all(ws).unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README.md"), "# demo\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    git(ws, &["add", "README.md", ".gitignore"]);
    git(ws, &["commit", "-q", "-m", "the human's commit"]);
    git(ws, &["branch", "feature"]);
    std::fs::write(ws.join("README.md"), "# demo, edited by the human\n").unwrap();
    std::fs::write(ws.join("human-notes.txt"), "mine\n").unwrap();
}

/// [`repo`], with what the human left committed: a clean tree.
fn clean_repo(ws: &Path) {
    repo(ws);
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "clean"]);
}

/// What git says of the user's side of the repository: HEAD, the
/// branches (but the `arbiter/…` ones the work is handed over on), the
/// index, and where HEAD points.
fn users_side(ws: &Path) -> (String, String, String, String) {
    (
        git(ws, &["rev-parse", "HEAD"]),
        git(
            ws,
            &["for-each-ref", "--exclude=refs/heads/arbiter", "refs/heads"],
        ),
        git(ws, &["ls-files", "-s"]),
        std::fs::read_to_string(ws.join(".git/HEAD")).unwrap(),
    )
}

/// `commit`'s changes against its parent: `A a.txt`, `M README.md`…
fn changes(ws: &Path, commit: &str) -> Vec<String> {
    git(
        ws,
        &["diff-tree", "-r", "--no-commit-id", "--name-status", commit],
    )
    .lines()
    .map(|l| l.replace('\t', " "))
    .collect()
}

/// Waits until branch `name` exists in `ws`; its commit.
async fn branch_made(ws: &Path, name: &str) -> String {
    let full = format!("refs/heads/{name}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(ws)
            .args(["rev-parse", "--verify", "--quiet", &full])
            .output()
            .unwrap();
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).trim().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no branch {name}: {}",
            git(ws, &["for-each-ref"])
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The report entries' checkpoints, in order.
fn checkpoints(log: &LogWatch) -> Vec<arbiter_protocol::Checkpoint> {
    log.bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::Orchestrator(e) => e.evidence.and_then(|ev| ev.checkpoint),
            _ => None,
        })
        .collect()
}

/// What the human sees: three Orchestrators in turn, each writing files;
/// the session's checkpoint ref holds the human's state (their edit and
/// their untracked file, as they left them), then one commit per
/// Orchestrator whose diff is exactly its writes, file by file, each named
/// in its report's evidence line; HEAD, the branches and the index are as
/// the human left them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_generations_leave_one_checkpoint_each_and_the_users_git_untouched() {
    let sys = System::start().await;
    let s = "s-checkpoints";
    let ws = sys.workspace(s);
    repo(&ws);
    let before = users_side(&ws);
    let log = sys.watch_log(s).await;

    let words = "Build it in three steps.";
    let arb = arbiter_lane(words);
    let briefs = [
        "Step one: a.txt.",
        "Step two: b.txt, and a.txt again.",
        "Step three: c.txt, and b.txt goes.",
    ];
    for brief in briefs {
        sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    }
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "All three steps are done."),
    );
    let write = |path: &str, content: &str| {
        MockReply::tool_use("write", json!({"path": path, "content": content}))
    };
    let scripts = [
        vec![write("a.txt", "one\n"), orch(true, "a.txt written.")],
        vec![
            write("b.txt", "two\n"),
            write("a.txt", "one, again\n"),
            orch(true, "b.txt written, a.txt changed."),
        ],
        vec![
            write("c.txt", "three\n"),
            MockReply::tool_use("bash", json!({"command": "rm b.txt"})),
            orch(true, "c.txt written, b.txt gone."),
        ],
    ];
    for (brief, script) in briefs.iter().zip(scripts) {
        let lane = orch_lane(brief);
        for reply in script {
            sys.mock.push(&lane, reply);
        }
    }
    sys.send(s, words).await;
    log.wait_for(
        "the closing words",
        |b| matches!(b, LogBody::Arbiter(e) if e.text.contains("All three steps are done.")),
    )
    .await;

    let made = checkpoints(&log);
    assert_eq!(made.len(), 3, "{made:#?}");
    let git_ref = format!("refs/arbiter/{s}/checkpoints");
    let chain: Vec<String> = git(&ws, &["rev-list", &git_ref, "^HEAD"])
        .lines()
        .map(str::to_owned)
        .collect();
    // Newest first: III, II, I, the human's state.
    assert_eq!(chain.len(), 4, "{chain:?}");
    let newest_first: Vec<&str> = made.iter().rev().map(|c| c.commit.as_str()).collect();
    assert_eq!(chain[..3], newest_first[..]);
    for c in &made {
        assert_eq!(c.git_ref, git_ref);
    }
    let human = &chain[3];
    assert_eq!(
        changes(&ws, human),
        ["M README.md", "A human-notes.txt"],
        "the human's state, against their HEAD"
    );
    assert!(git(&ws, &["log", "-1", "--format=%B", human]).starts_with("Before Orchestrator I: "));
    assert_eq!(changes(&ws, &made[0].commit), ["A a.txt"]);
    assert_eq!(changes(&ws, &made[1].commit), ["M a.txt", "A b.txt"]);
    assert_eq!(changes(&ws, &made[2].commit), ["D b.txt", "A c.txt"]);
    assert_eq!((made[0].files, made[1].files, made[2].files), (1, 2, 2));
    assert_eq!(
        git(&ws, &["show", &format!("{}:a.txt", made[1].commit)]),
        "one, again\n"
    );
    let message = git(&ws, &["log", "-1", "--format=%B", &made[1].commit]);
    assert!(
        message.starts_with("Orchestrator II, output 1: b.txt written, a.txt changed.")
            && message.contains(&format!("Arbiter-Session: {s}"))
            && message.contains("write 2"),
        "{message}"
    );
    assert_eq!(
        users_side(&ws),
        before,
        "HEAD, branches and index untouched"
    );
    // Each Orchestrator's work handed over as one commit on its branch,
    // whose diff is its writes, written from its report.
    let branches = [
        branch_made(&ws, &format!("arbiter/{s}/1")).await,
        branch_made(&ws, &format!("arbiter/{s}/2")).await,
        branch_made(&ws, &format!("arbiter/{s}/3")).await,
    ];
    assert_eq!(changes(&ws, &branches[0]), ["A a.txt"]);
    assert_eq!(changes(&ws, &branches[1]), ["M a.txt", "A b.txt"]);
    assert_eq!(changes(&ws, &branches[2]), ["D b.txt", "A c.txt"]);
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{}^", branches[0])]).trim(),
        *human
    );
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{}^", branches[2])]).trim(),
        made[1].commit
    );
    let message = git(&ws, &["log", "-1", "--format=%B", &branches[1]]);
    assert!(
        message.starts_with("Orchestrator II: b.txt written, a.txt changed.\n")
            && message.contains(&format!("Arbiter-Checkpoint: {}", made[1].commit)),
        "{message}"
    );
    assert_eq!(
        users_side(&ws),
        before,
        "HEAD, the user's branches and index untouched"
    );
    // The evidence line the human reads names each checkpoint.
    let lines = crate::evidence::console_lines(&sys, s).await;
    for c in &made {
        assert!(
            lines.contains(&format!("checkpoint {}", &c.commit[..12])),
            "{lines}"
        );
    }
}

/// What the human sees: an Orchestrator makes a 50 MB file, a build
/// directory `.gitignore` ignores and a small file; its checkpoint holds
/// the small file alone, and the evidence line says what was left out and
/// why: `big.bin (too large: 52428800 bytes, over 10485760)`, `target/
/// (ignored by .gitignore)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_and_oversized_files_stay_out_and_the_log_says_so() {
    let sys = System::start().await;
    let s = "s-checkpoint-skips";
    let ws = sys.workspace(s);
    clean_repo(&ws);
    let log = sys.watch_log(s).await;
    let words = "Build and keep the artefact.";
    let arb = arbiter_lane(words);
    let brief = "Make small.txt, a big binary and a build.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Built."));
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "bash",
            json!({"command": "mkdir -p target && echo obj > target/out.o && \
                   head -c 52428800 /dev/zero > big.bin && echo small > small.txt"}),
        ),
    );
    sys.mock
        .push(&lane, orch(true, "Built small.txt, big.bin and target/."));
    sys.send(s, words).await;
    log.wait_for(
        "the closing words",
        |b| matches!(b, LogBody::Arbiter(e) if e.text.contains("Built.")),
    )
    .await;
    let made = checkpoints(&log);
    assert_eq!(
        made.len(),
        1,
        "the clean tree needs no checkpoint before: {made:#?}"
    );
    assert_eq!(changes(&ws, &made[0].commit), ["A small.txt"]);
    let skipped: Vec<(String, String)> = made[0]
        .skipped
        .iter()
        .map(|k| (k.path.clone(), k.why.clone()))
        .collect();
    assert_eq!(
        skipped,
        [
            (
                "big.bin".to_owned(),
                "too large: 52428800 bytes, over 10485760".to_owned()
            ),
            ("target/".to_owned(), "ignored by .gitignore".to_owned())
        ]
    );
    let lines = crate::evidence::console_lines(&sys, s).await;
    assert!(
        lines.contains(
            "left out: big.bin (too large: 52428800 bytes, over 10485760), target/ (ignored by \
             .gitignore)"
        ),
        "{lines}"
    );
}

/// What the human sees: in a workspace that is not a repository the work
/// goes as before, and the first report's evidence says why there are no
/// checkpoints; later reports do not repeat it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_that_is_not_a_repository_says_why_there_are_no_checkpoints() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let brief = "Write plain.txt twice.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "plain.txt", "content": "1\n"})),
    );
    sys.mock.push(&lane, orch(false, "Wrote it once."));
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "plain.txt", "content": "2\n"})),
    );
    sys.mock.push(&lane, orch(true, "Wrote it twice."));
    summon(&sys, "default", "s-no-git", "o-no-git", brief).await;
    watch.wait_output("o-no-git", 2).await;
    let first = watch.evidence_of("o-no-git", 1).unwrap();
    assert_eq!(
        first.no_checkpoint.as_deref(),
        Some(
            "no checkpoints: the workspace is not a git repository (`git init` in it to have them)"
        )
    );
    let second = watch.evidence_of("o-no-git", 2).unwrap();
    assert_eq!(second.no_checkpoint, None);
    assert_eq!(second.checkpoint, None);
    assert!(!sys.workspace("s-no-git").join(".git").exists());
}

/// What the human sees: the worker running Orchestrator I is killed (kill
/// -9) in the middle of its turn, after it wrote a file and while its
/// model is asked again; another worker takes it over and finishes the
/// turn. The session's ref then holds exactly one checkpoint of that turn
/// (none lost, none made twice, no "as found" one for the half-done work),
/// holding the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_turn_loses_no_checkpoint_and_makes_none_twice() {
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let s = "s-checkpoint-kill";
    let ws = sys.workspace(s);
    clean_repo(&ws);
    let mut w1 = sys.worker_process("w1", 1);
    worker_ready(&sys, "w1").await;
    let brief = "Write half.txt, then report.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "half.txt", "content": "half\n"})),
    );
    sys.mock.push(
        &lane,
        orch(true, "never delivered").delay(std::time::Duration::from_secs(60)),
    );
    sys.mock.push(&lane, orch(true, "half.txt written."));
    summon(&sys, "default", s, "o-checkpoint-kill", brief).await;
    sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();
    let _w2 = sys.worker_process("w2", 1);
    watch.wait_output("o-checkpoint-kill", 1).await;
    let git_ref = format!("refs/arbiter/{s}/checkpoints");
    let chain: Vec<String> = git(&ws, &["rev-list", &git_ref, "^HEAD"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(chain.len(), 1, "{chain:?}");
    assert_eq!(changes(&ws, &chain[0]), ["A half.txt"]);
    let made = watch
        .evidence_of("o-checkpoint-kill", 1)
        .and_then(|e| e.checkpoint)
        .expect("the output's checkpoint");
    assert_eq!(made.commit, chain[0]);
    assert_eq!(
        watch
            .statuses_of("o-checkpoint-kill")
            .last()
            .unwrap()
            .worker_id,
        "w2"
    );
}

/// What the human sees: a worker configured with `push = "origin"` and a
/// pull-request command; when the Orchestrator is released, its branch
/// `arbiter/<session>/1` is on the origin (a local bare repository) with
/// the message written from its report and its handoff packet, the
/// command was called once with the branch and the title, and the
/// Orchestrator's stopped status names the branch, where it went and what
/// the command printed. The model's control characters are not in the
/// message; the worker's secrets are not in the command's environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_orchestrators_branch_is_pushed_and_the_pull_request_command_called_once() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let s = "s-handover";
    let ws = sys.workspace(s);
    clean_repo(&ws);
    let away = tempfile::tempdir().unwrap();
    let origin = away.path().join("origin.git");
    git(away.path(), &["init", "-q", "--bare", "origin.git"]);
    git(&ws, &["remote", "add", "origin", &origin.to_string_lossy()]);
    let record = away.path().join("pr-calls");
    let stub = away.path().join("open-pr");
    let rec = &record;
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" \"--\" >> {rec:?}\nenv >> {rec:?}.env\n\
             echo https://forge.example/pr/7\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut config = sys.worker_config("w-handover", 1, 200_000);
    config.hand_over = arbiter_worker::checkpoint::HandOver {
        push: Some("origin".to_owned()),
        pull_request: [
            &stub.to_string_lossy(),
            "--head",
            "{branch}",
            "--title",
            "{title}",
            "--body-file",
            "{body_file}",
        ]
        .map(|a| a.to_string())
        .to_vec(),
        // Set in every test process (cargo and nextest set it): passed on.
        pass_env: vec!["CARGO_PKG_NAME".to_owned()],
    };
    sys.spawn_worker_with(config);
    worker_ready(&sys, "w-handover").await;

    let brief = "Write the parser.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "write",
            json!({"path": "parser.rs", "content": "fn parse() {}\n"}),
        ),
    );
    sys.mock.push(
        &lane,
        MockReply::json(&json!({
            "expects_response": true,
            "message": "The parser is written.\n\x1b[31mIt parses nothing yet.",
            "handoff": {
                "done": [{"id": "T1", "what": "parser stub", "files": ["parser.rs"]}],
                "open": [{"id": "T2", "what": "parse numbers"}],
                "decisions": [{"decision": "hand-written", "why": "small grammar"}],
                "questions": [],
                "next_step": "Parse numbers."
            }
        })),
    );
    let orch_id = "o-handover";
    summon(&sys, "default", s, orch_id, brief).await;
    watch.wait_output(orch_id, 1).await;
    control(&sys, orch_id, arbiter_protocol::ControlAction::Release).await;
    let stopped = watch.wait_stopped(orch_id).await;
    let branch = stopped.branch.expect("the stopped status names the branch");
    let name = format!("arbiter/{s}/1");
    assert_eq!(branch.name, name);
    assert_eq!(branch.files, 1);
    assert_eq!(branch.pushed_to.as_deref(), Some("origin"));
    assert_eq!(
        branch.pull_request.as_deref(),
        Some("https://forge.example/pr/7")
    );
    assert_eq!(branch.problem, None);
    // On the origin, at the same commit, holding the Orchestrator's file.
    let there = git(&origin, &["rev-parse", &format!("refs/heads/{name}")]);
    assert_eq!(there.trim(), branch.commit);
    assert_eq!(changes(&origin, &branch.commit), ["A parser.rs"]);
    let message = git(&origin, &["log", "-1", "--format=%B", &branch.commit]);
    assert!(
        message.starts_with("Orchestrator I: The parser is written.\n\nIt parses nothing yet.")
            && !message.contains('\x1b')
            && message.contains("- done T1: parser stub (parser.rs)")
            && message.contains("- open T2: parse numbers")
            && message.contains("- next step: Parse numbers."),
        "{message}"
    );
    let calls = std::fs::read_to_string(&record).unwrap();
    let args: Vec<&str> = calls.lines().collect();
    assert_eq!(
        args[..5],
        [
            "--head",
            &name,
            "--title",
            "Orchestrator I: The parser is written.",
            "--body-file"
        ],
        "{calls}"
    );
    assert_eq!(
        args.iter().filter(|a| **a == "--").count(),
        1,
        "called once: {calls}"
    );
    // The worker's environment (the test process's: CARGO_*, NEXTEST_*, RUST_*
    // and the rest) reaches the command only as far as the list allows.
    let env = std::fs::read_to_string(format!("{}.env", record.display())).unwrap();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, _)| n)
        .collect();
    let allowed = [
        "PATH",
        "HOME",
        "LANG",
        "SSH_AUTH_SOCK",
        "CARGO_PKG_NAME",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
    ];
    assert!(names.iter().all(|n| allowed.contains(n)), "{env}");
    assert!(
        names.contains(&"CARGO_PKG_NAME") && names.contains(&"PATH"),
        "{env}"
    );
    assert!(
        std::env::var_os("CARGO_MANIFEST_DIR").is_some(),
        "the worker had more to leak"
    );
    // The user's own branches untouched, the branch made in theirs too.
    assert_eq!(
        git(&ws, &["rev-parse", &format!("refs/heads/{name}")]).trim(),
        branch.commit
    );
    assert_eq!(
        git(&ws, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "main"
    );
}

/// What the human sees: a parallel team of three, each member in its own
/// git worktree of the session's repository, each writing its own file;
/// when the team is released, three branches, `arbiter/<session>/1.1` to
/// `1.3`, each holding its member's file and nothing else, on the
/// session's HEAD. The session's own workspace and the user's branches
/// stay as they were: merging is the Arbiter's to ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_team_of_three_leaves_three_member_branches_each_with_its_own_files() {
    let sys = System::start().await;
    let s = "s-team-branches";
    let ws = sys.workspace(s);
    clean_repo(&ws);
    let head = git(&ws, &["rev-parse", "HEAD"]).trim().to_owned();
    let before = users_side(&ws);
    let log = sys.watch_log(s).await;
    let human = "Build the three parts in parallel";
    let arb = arbiter_lane(human);
    let parts = ["Write lexer.rs.", "Write parser.rs.", "Write printer.rs."];
    sys.mock.push(
        &arb,
        summons(
            "Build the three parts.",
            json!({
                "strategy": "parallel",
                "briefs": parts,
                "directive": {"words": human, "parsed": "parallel, 3 members", "confidence": 90}
            }),
        ),
    );
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "The three parts are built."),
    );
    sys.send(s, human).await;
    let members = summoned(&log, 3).await;
    let files = ["lexer.rs", "parser.rs", "printer.rs"];
    for (i, member) in members.iter().enumerate() {
        let lane = orch_lane(&member.brief);
        sys.mock.push(
            &lane,
            MockReply::tool_use(
                "write",
                json!({"path": files[i], "content": format!("// part {}\n", i + 1)}),
            ),
        );
        sys.mock
            .push(&lane, orch(true, &format!("{} is written.", files[i])));
    }
    for (i, member) in members.iter().enumerate() {
        let m = member.member.expect("a member");
        let name = format!("arbiter/{s}/{}.{m}", member.number);
        let commit = branch_made(&ws, &name).await;
        assert_eq!(changes(&ws, &commit), [format!("A {}", files[i])], "{name}");
        assert_eq!(
            git(&ws, &["rev-parse", &format!("{commit}^")]).trim(),
            head,
            "{name} starts from the session's HEAD"
        );
        let message = git(&ws, &["log", "-1", "--format=%s", &commit]);
        assert_eq!(
            message.trim(),
            format!("Orchestrator I.{m}: {} is written.", files[i])
        );
    }
    assert_eq!(users_side(&ws), before);
    for file in files {
        assert!(
            !ws.join(file).exists(),
            "{file} stays in its member's worktree"
        );
    }
}

/// Runs the real `arbiter-console` with `args` as the console role; its
/// stdout, and whether it succeeded (stderr when it did not).
async fn console(sys: &System, args: &[&str]) -> (bool, String) {
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(arbiter_tests::bin("arbiter-console"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(sys.nats_env("console"))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the console command ends")
    .unwrap();
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    (out.status.success(), text)
}

/// What the human sees: two Orchestrators in turn (I writes a.txt, II
/// writes b.txt and changes a.txt); `arbiter-console checkpoints` lists
/// both with their diffstat, `diff` shows I's; `arbiter-console rewind` to
/// I's checkpoint (by a prefix) is confirmed by the log (`Rewound to
/// checkpoint …`). With the human's next words the Arbiter hears of it,
/// and the next Orchestrator finds a.txt as I left it and no b.txt, its
/// first request saying where it starts; nothing was lost (the state
/// before the rewind is a checkpoint), and its branch stacks on the rewind.
/// A rewind to a checkpoint the session does not have is refused with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_to_after_generation_one_is_where_the_next_orchestrator_starts() {
    let sys = System::start().await;
    let s = "s-rewind";
    let ws = sys.workspace(s);
    clean_repo(&ws);
    let log = sys.watch_log(s).await;
    let words = "Build it in two steps.";
    let arb = arbiter_lane(words);
    let briefs = ["Step one: a.txt.", "Step two: b.txt, and a.txt again."];
    for brief in briefs {
        sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    }
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "Both steps are done."),
    );
    let write = |path: &str, content: &str| {
        MockReply::tool_use("write", json!({"path": path, "content": content}))
    };
    let scripts = [
        vec![write("a.txt", "one\n"), orch(true, "a.txt written.")],
        vec![
            write("b.txt", "two\n"),
            write("a.txt", "one, again\n"),
            orch(true, "b.txt written, a.txt changed."),
        ],
    ];
    for (brief, script) in briefs.iter().zip(scripts) {
        for reply in script {
            sys.mock.push(&orch_lane(brief), reply);
        }
    }
    sys.send(s, words).await;
    log.wait_for(
        "the closing words",
        |b| matches!(b, LogBody::Arbiter(e) if e.text.contains("Both steps are done.")),
    )
    .await;
    let made = checkpoints(&log);
    assert_eq!(made.len(), 2, "{made:#?}");
    let (first, short) = (&made[0].commit, &made[0].commit[..12]);

    let (ok, listed) = console(&sys, &["checkpoints", "--session", s]).await;
    assert!(ok, "{listed}");
    assert_eq!(
        listed.lines().collect::<Vec<_>>(),
        [
            format!("{short}  1 file, +1 -0  Orchestrator I, report: a.txt written."),
            format!(
                "{}  2 files, +2 -1  Orchestrator II, report: b.txt written, a.txt changed.",
                &made[1].commit[..12]
            ),
        ]
    );
    let repo_dir = ws.to_string_lossy().into_owned();
    let (ok, shown) = console(
        &sys,
        &["diff", "--session", s, &first[..8], "--repo", &repo_dir],
    )
    .await;
    assert!(
        ok && shown.contains("a.txt | 1 +") && shown.contains("+one"),
        "{shown}"
    );
    let (ok, said) = console(&sys, &["rewind", "--session", s, "ffff0000", "--yes"]).await;
    assert!(
        !ok && said.contains("no checkpoint of this session is named ffff0000"),
        "{said}"
    );

    let (ok, said) = console(&sys, &["rewind", "--session", s, short, "--yes"]).await;
    assert!(ok, "{said}");
    assert!(
        said.starts_with(&format!("Rewound to checkpoint {short} by console")),
        "{said}"
    );
    assert!(
        log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Rewound(e) if e.checkpoint == *first))
    );

    // The human edits meanwhile: that state is kept before the rewind.
    std::fs::write(ws.join("late.txt"), "the human's\n").unwrap();
    // The session's Arbiter answers on its first words' lane.
    let again = "Now do step two differently.";
    let brief3 = "Step two again: c.txt.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief3));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Redone."));
    let hold = arbiter_tests::Gate::new();
    let lane3 = orch_lane(brief3);
    sys.mock
        .push(&lane3, write("c.txt", "three\n").gated(hold.clone()));
    sys.mock.push(&lane3, orch(true, "c.txt written."));
    sys.send(s, again).await;
    sys.mock.wait_for_requests(&lane3, 1, WAIT).await;
    let first_request = sys.mock.requests_for(&lane3)[0].body.to_string();
    assert!(
        first_request.contains(&format!(
            "Before you started, the human rewound the workspace to checkpoint {short}"
        )),
        "{first_request}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    assert!(!ws.join("b.txt").exists());
    assert!(!ws.join("late.txt").exists());
    let told = sys
        .mock
        .requests_for(&arb)
        .iter()
        .map(|r| r.body.to_string())
        .find(|body| body.contains(again))
        .expect("the Arbiter's request with the human's words");
    assert!(
        told.contains(&format!(
            "The human rewound the workspace to checkpoint {short}"
        )),
        "{told}"
    );
    hold.open();
    log.wait_for(
        "the closing words",
        |b| matches!(b, LogBody::Arbiter(e) if e.text.contains("Redone.")),
    )
    .await;
    // Nothing lost: the workspace as it was (II's work and the human's
    // late edit) is the rewind's parent, and II's checkpoint before it.
    let git_ref = format!("refs/arbiter/{s}/checkpoints");
    let subjects = git(&ws, &["log", "--format=%s", &git_ref]);
    let before = git(
        &ws,
        &["log", "--format=%H", "--grep=^Before the rewind", &git_ref],
    );
    let before = before.trim();
    assert_eq!(
        git(&ws, &["show", &format!("{before}:late.txt")]),
        "the human's\n",
        "{subjects}"
    );
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{before}^")]).trim(),
        made[1].commit
    );
    let rewound = git(&ws, &["log", "--format=%H", "--grep=^Rewound to", &git_ref]);
    let rewound = rewound.trim();
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{rewound}^")]).trim(),
        before
    );
    assert_eq!(
        git(&ws, &["show", &format!("{}:b.txt", made[1].commit)]),
        "two\n"
    );
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{rewound}^{{tree}}")]),
        git(&ws, &["rev-parse", &format!("{first}^{{tree}}")]),
        "{subjects}"
    );
    let third = branch_made(&ws, &format!("arbiter/{s}/3")).await;
    assert_eq!(changes(&ws, &third), ["A c.txt"]);
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{third}^")]).trim(),
        rewound
    );
}

/// What the human sees: a sequential chain of two links, both in the
/// session's workspace; each link's work is handed over on a branch named
/// by its link, `arbiter/<session>/1.1` holding the plan and `1.2` the
/// parser, the second stacked on the first's checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_leaves_one_branch_per_link_named_by_its_link() {
    let sys = System::start().await;
    let s = "s-chain-branches";
    let ws = sys.workspace(s);
    clean_repo(&ws);
    let log = sys.watch_log(s).await;
    let human = "Plan the parser, then build it, one after the other";
    let arb = arbiter_lane(human);
    sys.mock.push(
        &arb,
        summons(
            "Ship the parser.",
            json!({
                "strategy": "sequential",
                "briefs": ["Plan it: plan.md.", "Build it: parser.rs."],
                "directive": {"words": human, "parsed": "sequential, 2 links", "confidence": 90}
            }),
        ),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Shipped."));
    sys.send(s, human).await;
    let files = ["plan.md", "parser.rs"];
    for (i, file) in files.iter().enumerate() {
        let links = summoned(&log, i + 1).await;
        let lane = orch_lane(&links[i].brief);
        sys.mock.push(
            &lane,
            MockReply::tool_use("write", json!({"path": file, "content": "x\n"})),
        );
        sys.mock
            .push(&lane, orch(true, &format!("{file} written.")));
    }
    let first = branch_made(&ws, &format!("arbiter/{s}/1.1")).await;
    let second = branch_made(&ws, &format!("arbiter/{s}/1.2")).await;
    assert_eq!(changes(&ws, &first), ["A plan.md"]);
    assert_eq!(changes(&ws, &second), ["A parser.rs"]);
    assert_eq!(
        git(&ws, &["log", "-1", "--format=%s", &second]).trim(),
        "Orchestrator I.2: parser.rs written."
    );
    let made = checkpoints(&log);
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{second}^")]).trim(),
        made[0].commit,
        "the second link starts where the first left the workspace"
    );
}

/// What the human sees: a repository with no commit yet (`git init` and
/// nothing else); the first checkpoint holds the Orchestrator's file, its
/// diffstat counted against the empty tree, and has no parent (the empty
/// workspace it found made none before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_with_no_commit_gets_a_first_checkpoint_with_its_diffstat() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let s = "s-no-commit";
    let ws = sys.workspace(s);
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    let brief = "Write first.txt.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "first.txt", "content": "a\nb\n"})),
    );
    sys.mock.push(&lane, orch(true, "first.txt written."));
    summon(&sys, "default", s, "o-no-commit", brief).await;
    watch.wait_output("o-no-commit", 1).await;
    let made = watch
        .evidence_of("o-no-commit", 1)
        .and_then(|e| e.checkpoint)
        .expect("a checkpoint");
    assert_eq!((made.files, made.insertions, made.deletions), (1, 2, 0));
    assert_eq!(
        git(&ws, &["ls-tree", "--name-only", &made.commit]).trim(),
        "first.txt"
    );
    assert_eq!(git(&ws, &["rev-list", "--count", &made.commit]).trim(), "1");
}
