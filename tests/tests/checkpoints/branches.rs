//! The work handed over as branches: pushed with a pull request, one per
//! team member, one per link of a chain.

use super::*;

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
