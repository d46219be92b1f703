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

#[path = "checkpoints/branches.rs"]
mod branches;
#[path = "checkpoints/commits.rs"]
mod commits;
#[path = "checkpoints/rewind.rs"]
mod rewind;
