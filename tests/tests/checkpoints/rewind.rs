//! `arbiter-console checkpoints`, `diff` and `rewind`, and where the next
//! Orchestrator starts after a rewind.

use super::*;

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
