//! A checkpoint per turn: what each holds and leaves out, and that a kill -9
//! neither loses one nor makes one twice.

use super::*;

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
