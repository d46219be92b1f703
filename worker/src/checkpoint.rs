//! Checkpoints (docs/checkpoints.md): when the session's workspace is a git
//! repository, the worker commits the whole workspace after each output of
//! an Orchestrator that changed it, on a hidden ref of the session's
//! (`refs/arbiter/<session>/checkpoints`), each checkpoint the parent of
//! the next, so that one's diff is what changed since the one before. A
//! checkpoint is made with plumbing (`read-tree`, `add` and `write-tree`
//! into an index of its own, `commit-tree`, `update-ref`): the user's index,
//! HEAD and branches are never touched. What `.gitignore` ignores stays out,
//! as does any file over [`MAX_FILE_BYTES`], and the checkpoint says so.
//!
//! git runs in the worker's sandbox, as the tools' commands do: the
//! repository's configuration is the model's to write, and a filter or an
//! fsmonitor it names must not run outside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arbiter_protocol::{Checkpoint, Skipped, evidence::MAX_FILES_LISTED};

use crate::sandbox::Sandbox;

mod branch;
mod rewind;
pub(crate) use branch::Generation;
pub use branch::HandOver;

/// The largest file a checkpoint takes; a larger one is left out, and said.
pub(crate) const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// How long one git command may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Who the checkpoints' commits are by.
const AUTHOR: (&str, &str) = ("Arbiter", "arbiter@localhost");
/// What every git command is run with: nothing of the repository's
/// configuration that runs a program or writes behind the worker's back.
const SAFE: [&str; 10] = [
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "core.untrackedCache=false",
];

/// The checkpoints of one workspace (public for `arbiter-bench`, which
/// times them).
#[derive(Debug, Clone)]
pub struct Checkpoints {
    workspace: PathBuf,
    /// The workspace's git directory (a team member's worktree has one of
    /// its own), and the repository's, where objects and refs are: both
    /// `<workspace>/.git` for the session's own workspace.
    git_dir: PathBuf,
    common_dir: PathBuf,
    git_ref: String,
    sandbox: Arc<Sandbox>,
    /// Whose they are: the Orchestrator's name (`Orchestrator II`), the
    /// session and the Orchestrator's id, for the commits' messages.
    name: String,
    session: String,
    orch_id: String,
    number: u32,
    /// The member (or a chain's link) it is, for its name and its branch's.
    member: Option<u32>,
    /// It works in a worktree of its own (a parallel member), not in the
    /// session's workspace.
    own_worktree: bool,
}

impl Checkpoints {
    /// The checkpoints of `summon`'s Orchestrator in `workspace`, or why
    /// there are none: the one sentence the human reads.
    pub fn open(
        sandbox: Arc<Sandbox>,
        workspace: &Path,
        summon: &arbiter_protocol::Summon,
    ) -> Result<Self, String> {
        let (session, member) = (summon.session_id.as_str(), summon.member);
        let git = workspace.join(".git");
        let (git_dir, common_dir) = if git.is_dir() {
            (git.clone(), git)
        } else if git.is_file() {
            worktree_dirs(workspace, &git)?
        } else {
            return Err(
                "no checkpoints: the workspace is not a git repository (`git init` in it \
                 to have them)"
                    .to_owned(),
            );
        };
        let git_ref = match member {
            None => format!("refs/arbiter/{session}/checkpoints"),
            Some(m) => format!("refs/arbiter/{session}/m{m}/checkpoints"),
        };
        Ok(Self {
            workspace: workspace.to_owned(),
            git_dir,
            common_dir,
            git_ref,
            sandbox,
            // A chain's link works in the session's workspace, named by its link.
            name: arbiter_protocol::member_name(summon.number, member.or(summon.link)),
            session: session.to_owned(),
            orch_id: summon.orch_id.clone(),
            number: summon.number,
            member: member.or(summon.link),
            own_worktree: member.is_some(),
        })
    }

    /// The workspace as the Orchestrator finds it at its start, when it
    /// differs from the last checkpoint (the human's state, the first time).
    pub(crate) async fn make_start(&self) -> Result<Option<Checkpoint>, String> {
        let text = format!(
            "Before {}: the workspace as it found it\n\n{}",
            self.name,
            self.trailers(Kind::Start, None)
        );
        self.make(&text).await
    }

    /// The workspace with output `seq` (whose message is `message`, the
    /// worker's evidence `summary`).
    pub async fn make_output(
        &self,
        seq: u64,
        message: &str,
        summary: &str,
    ) -> Result<Option<Checkpoint>, String> {
        let first: String = message
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        let text = format!(
            "{}, output {seq}: {first}\n\nThe worker's evidence: {summary}\n\n{}",
            self.name,
            self.trailers(Kind::Output, Some(seq))
        );
        self.make(&text).await
    }

    /// The workspace as the Orchestrator leaves it at its end, when it
    /// changed since its last output (a team member's last writes).
    pub(crate) async fn make_end(&self) -> Result<Option<Checkpoint>, String> {
        let text = format!(
            "{} at its end: the workspace as it left it\n\n{}",
            self.name,
            self.trailers(Kind::End, None)
        );
        self.make(&text).await
    }

    fn trailers(&self, kind: Kind, seq: Option<u64>) -> String {
        let mut text = format!(
            "Arbiter-Session: {}\nArbiter-Orchestrator: {}\nArbiter-Checkpoint: {}\n",
            self.session,
            self.orch_id,
            kind.word()
        );
        if let Some(seq) = seq {
            text.push_str(&format!("Arbiter-Output: {seq}\n"));
        }
        text
    }

    /// Commits the workspace as it is with `message`, when it differs from
    /// the last checkpoint (or, before the first, from HEAD): `None` when
    /// it does not.
    ///
    /// The index it builds the tree in is a copy of the one the last
    /// checkpoint left (else of the user's), read with `read-tree -m`,
    /// which keeps the files' stat data where their content matches: `git
    /// add` then reads only the files that changed, not the whole
    /// repository. Each run has a copy of its own, kept for the next only
    /// once it is complete, so a worker killed midway leaves no lock behind.
    async fn make(&self, message: &str) -> Result<Option<Checkpoint>, String> {
        let git_dir = &self.git_dir;
        let index = git_dir.join(format!("arbiter-checkpoint-{}.index", uuid::Uuid::now_v7()));
        let kept = self.kept_index();
        let seed = if tokio::fs::try_exists(&kept).await.unwrap_or(false) {
            kept.clone()
        } else {
            git_dir.join("index")
        };
        let seeded = tokio::fs::copy(&seed, &index).await.is_ok();
        let made = self.make_with(&index, seeded, message).await;
        if made.is_ok() {
            let _ = tokio::fs::rename(&index, &kept).await;
        }
        let _ = tokio::fs::remove_file(&index).await;
        made
    }

    /// Where the index the last checkpoint left is kept, for the next.
    fn kept_index(&self) -> PathBuf {
        let name: String = self
            .git_ref
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.git_dir.join(format!("arbiter-{name}.index"))
    }

    async fn make_with(
        &self,
        index: &Path,
        seeded: bool,
        message: &str,
    ) -> Result<Option<Checkpoint>, String> {
        let with_index = [(
            "GIT_INDEX_FILE".to_owned(),
            index.to_string_lossy().into_owned(),
        )];
        // One git for the four names (each git here is a sandbox started).
        let [last, last_tree, head, head_tree] = self
            .revs([
                format!("{}^{{commit}}", self.git_ref),
                format!("{}^{{tree}}", self.git_ref),
                "HEAD^{commit}".to_owned(),
                "HEAD^{tree}".to_owned(),
            ])
            .await?;
        let (base, base_tree) = match &last {
            Some(_) => (last.clone(), last_tree),
            None => (head, head_tree),
        };
        match &base {
            // The stat data of what matches kept; an index that cannot be
            // read so (a merge in progress in the user's) is read afresh.
            Some(commit) => {
                let kept = seeded
                    && self
                        .git(&["read-tree", "-m", commit], &with_index)
                        .await
                        .is_ok();
                if !kept {
                    let _ = tokio::fs::remove_file(index).await;
                    self.git(&["read-tree", commit], &with_index).await?;
                }
            }
            None => {
                self.git(&["read-tree", "--empty"], &with_index).await?;
            }
        };
        // What the checkpoint takes: what git would add, but for files over
        // the cap. Only what changed since the last one (or is untracked) is
        // added, so only those are looked at: all of them in one task.
        let listed = self
            .git(
                &[
                    "ls-files",
                    "-z",
                    "--modified",
                    "--others",
                    "--exclude-standard",
                ],
                &with_index,
            )
            .await?;
        let workspace = self.workspace.clone();
        let too_large = tokio::task::spawn_blocking(move || {
            nul_separated(&listed)
                .into_iter()
                .filter_map(|path| {
                    let meta = std::fs::symlink_metadata(workspace.join(&path)).ok()?;
                    (meta.is_file() && meta.len() > MAX_FILE_BYTES).then_some((path, meta.len()))
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| format!("the workspace's files could not be looked at: {e}"))?;
        let mut skipped = Vec::new();
        let mut excluded = Vec::new();
        for (path, len) in too_large {
            skipped.push(Skipped {
                why: format!("too large: {len} bytes, over {MAX_FILE_BYTES}"),
                path: path.clone(),
            });
            excluded.push(format!(":(exclude,literal){path}"));
        }
        let ignored = self
            .git(
                &[
                    "ls-files",
                    "-z",
                    "--others",
                    "--ignored",
                    "--exclude-standard",
                    "--directory",
                ],
                &with_index,
            )
            .await?;
        for path in nul_separated(&ignored) {
            skipped.push(Skipped {
                path,
                why: "ignored by .gitignore".to_owned(),
            });
        }
        let mut add = vec!["add", "-A", "--", "."];
        add.extend(excluded.iter().map(String::as_str));
        self.git(&add, &with_index).await?;
        let tree = text(&self.git(&["write-tree"], &with_index).await?);
        let from = match base_tree {
            Some(tree) => tree,
            // No commit before it: against the empty tree, in the
            // repository's own object format (SHA-1 or SHA-256), so that an
            // empty workspace makes none either.
            None => text(&self.git(&["mktree"], &[]).await?),
        };
        if from == tree {
            return Ok(None);
        }
        let stat = Numstat::of(
            &self
                .git(&["diff-tree", "-r", "-z", "--numstat", &from, &tree], &[])
                .await?,
        );
        let mut commit_tree = vec!["commit-tree", tree.as_str(), "-m", message];
        if let Some(parent) = &base {
            commit_tree.extend(["-p", parent.as_str()]);
        }
        let author = [
            ("GIT_AUTHOR_NAME", AUTHOR.0),
            ("GIT_AUTHOR_EMAIL", AUTHOR.1),
            ("GIT_COMMITTER_NAME", AUTHOR.0),
            ("GIT_COMMITTER_EMAIL", AUTHOR.1),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let commit = text(&self.git(&commit_tree, &author).await?);
        // Moved only from where it was seen: a ref another writer moved
        // meanwhile is not overwritten.
        let old = last.unwrap_or_else(|| "0".repeat(40));
        self.git(&["update-ref", &self.git_ref, &commit, &old], &[])
            .await?;
        let more = skipped.len().saturating_sub(MAX_FILES_LISTED);
        skipped.truncate(MAX_FILES_LISTED);
        Ok(Some(Checkpoint {
            commit,
            git_ref: self.git_ref.clone(),
            files: stat.files,
            insertions: stat.insertions,
            deletions: stat.deletions,
            skipped,
            skipped_more: more as u64,
        }))
    }

    /// The objects `specs` name, each `None` when it names none, from one
    /// `git cat-file --batch-check`.
    async fn revs<const N: usize>(
        &self,
        specs: [String; N],
    ) -> Result<[Option<String>; N], String> {
        let mut input = specs.join("\n");
        input.push('\n');
        let out = self
            .git_fed(
                &["cat-file", "--batch-check=%(objectname)"],
                &[],
                input.into_bytes(),
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.lines();
        Ok(std::array::from_fn(|_| {
            lines
                .next()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.ends_with(" missing") && !l.contains(' '))
                .map(str::to_owned)
        }))
    }

    /// The object `spec` names, or `None`.
    async fn rev(&self, spec: &str) -> Option<String> {
        self.git(&["rev-parse", "--verify", "--quiet", spec], &[])
            .await
            .ok()
            .map(|out| text(&out))
            .filter(|s| !s.is_empty())
    }

    /// Runs `git <args>` in the workspace, in the sandbox; its stdout, or
    /// why it failed.
    async fn git(&self, args: &[&str], env: &[(String, String)]) -> Result<Vec<u8>, String> {
        self.git_fed(args, env, Vec::new()).await
    }

    /// [`Checkpoints::git`] with `input` on its stdin.
    async fn git_fed(
        &self,
        args: &[&str],
        env: &[(String, String)],
        input: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        let mut all: Vec<String> = SAFE.iter().map(|s| (*s).to_owned()).collect();
        all.extend(args.iter().map(|s| (*s).to_owned()));
        // A team member's worktree: the repository's directory, where its
        // objects and refs are, is shown to git too.
        let also: &[PathBuf] = if self.common_dir == self.git_dir {
            &[]
        } else {
            std::slice::from_ref(&self.common_dir)
        };
        let mut cmd = self
            .sandbox
            .server_command_with(&self.workspace, also, "git", &all, env);
        cmd.stdin(if input.is_empty() {
            std::process::Stdio::null()
        } else {
            std::process::Stdio::piped()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let run = async {
            let mut child = cmd.spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                use tokio::io::AsyncWriteExt as _;
                stdin.write_all(&input).await?;
            }
            child.wait_with_output().await
        };
        let out = tokio::time::timeout(GIT_TIMEOUT, run)
            .await
            .map_err(|_| format!("git {} took longer than {GIT_TIMEOUT:?}", args[0]))?
            .map_err(|e| format!("git {} did not start: {e}", args[0]))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "git {} failed ({}): {}",
                args[0],
                out.status,
                said.trim()
            ));
        }
        Ok(out.stdout)
    }
}

/// Which of an Orchestrator's checkpoints a commit is, in its
/// `Arbiter-Checkpoint` trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The workspace as it found it.
    Start,
    /// With one of its outputs.
    Output,
    /// As it left it.
    End,
    /// As it was before a rewind (`checkpoint/rewind.rs`).
    BeforeRewind,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Output => "output",
            Self::End => "end",
            Self::BeforeRewind => "before-rewind",
        }
    }
}

/// A git worktree's own git directory (from its `.git` file) and its
/// repository's (the worktree directory's `commondir`), or why they cannot
/// be read: checkpoints need both.
fn worktree_dirs(workspace: &Path, dot_git: &Path) -> Result<(PathBuf, PathBuf), String> {
    let unreadable = |why: String| format!("no checkpoints: the workspace's .git file {why}");
    let text =
        std::fs::read_to_string(dot_git).map_err(|e| unreadable(format!("is unreadable: {e}")))?;
    let named = text
        .lines()
        .find_map(|line| line.strip_prefix("gitdir:"))
        .map(str::trim)
        .ok_or_else(|| unreadable("names no git directory".to_owned()))?;
    let git_dir = workspace
        .join(named)
        .canonicalize()
        .map_err(|e| unreadable(format!("names {named}, which cannot be read: {e}")))?;
    let common = std::fs::read_to_string(git_dir.join("commondir"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| ".".to_owned());
    let common_dir = git_dir
        .join(&common)
        .canonicalize()
        .map_err(|e| unreadable(format!("leads to a repository that cannot be read: {e}")))?;
    Ok((git_dir, common_dir))
}

/// What `git diff-tree -z --numstat` counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Numstat {
    files: u64,
    insertions: u64,
    deletions: u64,
}

impl Numstat {
    /// Reads `<added>\t<deleted>\t<path>\0` records (`-` for a binary file).
    fn of(out: &[u8]) -> Self {
        let mut stat = Self::default();
        for record in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let text = String::from_utf8_lossy(record);
            let mut fields = text.splitn(3, '\t');
            let (Some(added), Some(deleted), Some(_)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            stat.files += 1;
            stat.insertions += added.parse::<u64>().unwrap_or(0);
            stat.deletions += deleted.parse::<u64>().unwrap_or(0);
        }
        stat
    }
}

fn nul_separated(out: &[u8]) -> Vec<String> {
    out.split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).trim().to_owned()
}
