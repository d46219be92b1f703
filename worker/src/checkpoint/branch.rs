//! The hand-over (docs/checkpoints.md): when an Orchestrator ends, its work
//! becomes one commit on a branch of its own, `arbiter/<session>/<n>` (a
//! team member's `arbiter/<session>/<n>.<m>`), whose parent is the
//! workspace as the Orchestrator found it and whose tree is the workspace
//! as it left it, so that the branch's one diff is everything it changed.
//! Its message is written from the Orchestrator's last report and its
//! handoff packet. The branch is only ever created, never moved: a branch
//! of that name that points elsewhere is left as it is, and said.
//!
//! Pushing it (`push = "origin"`) and opening a pull request (a command the
//! user configures) are opt-in. Both run outside the sandbox, with the
//! user's own credentials, so neither runs from the workspace's repository,
//! whose configuration the Orchestrators' tools can write: the branch is
//! fetched into a repository of the worker's own, and pushed from there.

use std::path::Path;
use std::time::Duration;

use arbiter_protocol::{Branch, Handoff};

use super::{AUTHOR, Checkpoints, Kind, nul_separated, text};

/// How long the push, or the pull-request command, may take.
const HAND_OVER_TIMEOUT: Duration = Duration::from_secs(120);
/// Characters of a pull request's title, at most.
const MAX_TITLE: usize = 72;

/// What the worker does with a branch beyond making it: the config file's
/// `[checkpoints]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandOver {
    /// Where to push it: a remote's name in the workspace's repository, or a
    /// URL (or path). `None`: it is not pushed.
    pub push: Option<String>,
    /// The command that opens a pull request for a branch the push created,
    /// with `{branch}`, `{title}`, `{body_file}` and `{remote}` in its
    /// arguments replaced. Empty: none.
    pub pull_request: Vec<String>,
    /// Variables of the worker's environment the push and the command get,
    /// besides `PATH`, `HOME`, `LANG` and `SSH_AUTH_SOCK` (a forge's token:
    /// `GH_TOKEN`).
    pub pass_env: Vec<String>,
}

impl HandOver {
    /// Reads the config file's `[checkpoints]` table; an unknown key, or a
    /// value of the wrong type, is an error that names it.
    pub fn parse(table: &toml::Table) -> Result<Self, String> {
        let mut out = Self::default();
        for (key, value) in table {
            let words = |value: &toml::Value| -> Result<Vec<String>, String> {
                value
                    .as_array()
                    .and_then(|items| {
                        items
                            .iter()
                            .map(|v| v.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                    })
                    .ok_or_else(|| format!("[checkpoints] {key}: expected a list of strings"))
            };
            match key.as_str() {
                "push" => {
                    let remote = value
                        .as_str()
                        .filter(|s| !s.trim().is_empty())
                        .ok_or("[checkpoints] push: expected a remote's name or a URL")?;
                    out.push = Some(remote.to_owned());
                }
                "pull_request" => out.pull_request = words(value)?,
                "pass_env" => out.pass_env = words(value)?,
                other => {
                    return Err(format!(
                        "[checkpoints] {other}: unknown key (push, pull_request, pass_env)"
                    ));
                }
            }
        }
        if !out.pull_request.is_empty() && out.push.is_none() {
            return Err(
                "[checkpoints] pull_request needs push: a pull request is opened for a pushed branch"
                    .to_owned(),
            );
        }
        Ok(out)
    }
}

/// What the branch's message is written from.
pub(crate) struct Generation<'a> {
    pub report: Option<&'a str>,
    pub handoff: Option<&'a Handoff>,
}

impl Checkpoints {
    /// The branch this Orchestrator's work is handed over on.
    pub(crate) fn branch_name(&self) -> String {
        match self.member {
            None => format!("arbiter/{}/{}", self.session, self.number),
            Some(m) => format!("arbiter/{}/{}.{m}", self.session, self.number),
        }
    }

    /// Hands the Orchestrator's work over as its branch (pushed and a pull
    /// request opened, as `config` says): `None` when it changed nothing.
    /// Done again (a worker that took the ended Orchestrator over) it finds
    /// the same commit, leaves the branch as it is and opens no second
    /// pull request.
    pub(crate) async fn hand_over(
        &self,
        generation: Generation<'_>,
        config: &HandOver,
    ) -> Result<Option<Branch>, String> {
        if self.own_worktree {
            // A member's worktree is its own: what it wrote after its last
            // output is its work too. The session's workspace is not: a
            // later Orchestrator may be writing in it.
            self.make_end().await?;
        }
        let Some((tip, parent)) = self.own_span().await? else {
            return Ok(None);
        };
        let tree = self
            .rev(&format!("{tip}^{{tree}}"))
            .await
            .ok_or("the last checkpoint has no tree")?;
        let parent_tree = match &parent {
            Some(p) => self.rev(&format!("{p}^{{tree}}")).await,
            None => None,
        };
        if parent_tree.as_deref() == Some(tree.as_str()) {
            return Ok(None);
        }
        let files = match &parent_tree {
            Some(from) => {
                let out = self
                    .git(&["diff-tree", "-r", "-z", "--name-only", from, &tree], &[])
                    .await?;
                nul_separated(&out).len()
            }
            None => {
                let out = self
                    .git(&["ls-tree", "-r", "-z", "--name-only", &tree], &[])
                    .await?;
                nul_separated(&out).len()
            }
        };
        let message = self.branch_message(&generation, &tip);
        // Dated as the last checkpoint: made again, it is the same commit.
        let date = text(&self.git(&["log", "-1", "--format=%cI", &tip], &[]).await?);
        let mut env: Vec<(String, String)> = [
            ("GIT_AUTHOR_NAME", AUTHOR.0),
            ("GIT_AUTHOR_EMAIL", AUTHOR.1),
            ("GIT_COMMITTER_NAME", AUTHOR.0),
            ("GIT_COMMITTER_EMAIL", AUTHOR.1),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec();
        env.push(("GIT_AUTHOR_DATE".to_owned(), date.clone()));
        env.push(("GIT_COMMITTER_DATE".to_owned(), date));
        let mut commit_tree = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
        if let Some(p) = &parent {
            commit_tree.extend(["-p", p.as_str()]);
        }
        let commit = text(&self.git(&commit_tree, &env).await?);
        let name = self.branch_name();
        let full = format!("refs/heads/{name}");
        match self.rev(&full).await {
            None => {
                // Created only: `update-ref` refuses if it came to exist meanwhile.
                self.git(&["update-ref", &full, &commit, &"0".repeat(40)], &[])
                    .await?;
            }
            Some(at) if at == commit => {}
            Some(at) => {
                return Err(format!(
                    "the branch {name} exists already, at {}: left as it is",
                    short(&at)
                ));
            }
        }
        let mut branch = Branch {
            name,
            commit,
            files: files as u64,
            ..Branch::default()
        };
        if let Some(remote) = &config.push {
            self.push(&mut branch, remote, &message, config).await;
        }
        Ok(Some(branch))
    }

    /// This Orchestrator's newest checkpoint on the chain, and the commit
    /// it started from: its `start` checkpoint, else the newest checkpoint
    /// before its own, else the commit its first checkpoint was made on
    /// (HEAD). `None`: it has no checkpoint. The parent is `None` in a
    /// repository with no commit before the Orchestrator's.
    async fn own_span(&self) -> Result<Option<(String, Option<String>)>, String> {
        let format = "--format=%H%x1f%P%x1f%(trailers:key=Arbiter-Orchestrator,valueonly,separator=%x2c)%x1f%(trailers:key=Arbiter-Checkpoint,valueonly,separator=%x2c)%x1e";
        if self
            .rev(&format!("{}^{{commit}}", self.git_ref))
            .await
            .is_none()
        {
            return Ok(None);
        }
        let out = self
            .git(&["log", "--first-parent", format, &self.git_ref], &[])
            .await?;
        let log = String::from_utf8_lossy(&out);
        let (mut tip, mut before) = (None, None);
        for entry in log.split('\x1e').map(str::trim).filter(|e| !e.is_empty()) {
            let fields: Vec<&str> = entry.split('\x1f').collect();
            let [commit, parents, orch, kind] = fields[..] else {
                continue;
            };
            let ours = orch.trim() == self.orch_id;
            match &tip {
                // Later Orchestrators' checkpoints, newer than its own.
                None if !ours => continue,
                None if kind.trim() == Kind::Start.word() => return Ok(None),
                None => tip = Some(commit.to_owned()),
                Some(_) if !ours || kind.trim() == Kind::Start.word() => {
                    return Ok(tip.map(|t| (t, Some(commit.to_owned()))));
                }
                Some(_) => {}
            }
            before = parents.split_whitespace().next().map(str::to_owned);
        }
        Ok(tip.map(|t| (t, before)))
    }

    /// The branch's message: the report's first line as its subject, the
    /// rest of the report, the handoff packet, then trailers. Control
    /// characters the model wrote are dropped: `git log` shows it on a
    /// terminal.
    fn branch_message(&self, generation: &Generation<'_>, tip: &str) -> String {
        let report = generation.report.map(clean).unwrap_or_default();
        let mut lines = report.lines();
        let first = lines.next().unwrap_or_default().trim();
        let subject = if first.is_empty() {
            format!("{}: its work", self.name)
        } else {
            format!("{}: {first}", self.name)
        };
        let mut text = subject;
        text.push_str("\n\n");
        let rest = lines.collect::<Vec<_>>().join("\n");
        if !rest.trim().is_empty() {
            text.push_str(rest.trim());
            text.push_str("\n\n");
        }
        if let Some(packet) = generation.handoff {
            text.push_str(&clean(&packet_text(packet)));
            text.push('\n');
        }
        text.push_str(&format!(
            "Arbiter-Session: {}\nArbiter-Orchestrator: {}\nArbiter-Checkpoint: {tip}\n",
            self.session, self.orch_id
        ));
        text
    }

    /// Pushes the branch to `remote` from a repository of the worker's own,
    /// then opens a pull request when the push created it. What goes wrong
    /// is put in `branch.problem`: the branch stays made.
    async fn push(&self, branch: &mut Branch, remote: &str, message: &str, config: &HandOver) {
        let url = if remote.contains([':', '/']) {
            remote.to_owned()
        } else {
            let key = format!("remote.{remote}.url");
            match self.git(&["config", "--get", &key], &[]).await {
                Ok(out) if !text(&out).is_empty() => text(&out),
                _ => {
                    branch.problem = Some(format!(
                        "not pushed: the repository has no remote named {remote}"
                    ));
                    return;
                }
            }
        };
        let shown = redact(&url);
        let away = std::env::temp_dir().join(format!("arbiter-push-{}", uuid::Uuid::now_v7()));
        let pushed = self.push_from(&away, &url, branch, config).await;
        match pushed {
            Ok(created) => {
                branch.pushed_to = Some(if remote == url {
                    shown.clone()
                } else {
                    remote.to_owned()
                });
                if created && !config.pull_request.is_empty() {
                    match self
                        .pull_request(&away, branch, remote, message, config)
                        .await
                    {
                        Ok(said) => branch.pull_request = said,
                        Err(e) => branch.problem = Some(e),
                    }
                }
            }
            Err(e) => {
                branch.problem = Some(format!(
                    "not pushed to {shown}: {}",
                    e.replace(&url, &shown)
                ))
            }
        }
        let _ = tokio::fs::remove_dir_all(&away).await;
    }

    /// `Ok(true)`: the push created the branch on the remote; `Ok(false)`:
    /// it was there already, at that commit.
    async fn push_from(
        &self,
        away: &Path,
        url: &str,
        branch: &Branch,
        config: &HandOver,
    ) -> Result<bool, String> {
        let spec = format!("refs/heads/{0}:refs/heads/{0}", branch.name);
        let from = self.common_dir.to_string_lossy().into_owned();
        let away_s = away.to_string_lossy().into_owned();
        own_git(&["init", "--bare", "--quiet", &away_s], None, config).await?;
        own_git(
            &[
                "-c",
                "protocol.file.allow=always",
                "fetch",
                "--no-tags",
                "--quiet",
                &from,
                &spec,
            ],
            Some(away),
            config,
        )
        .await?;
        let out = own_git(&["push", "--porcelain", url, &spec], Some(away), config).await?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .any(|line| line.starts_with("*\t")))
    }

    /// Runs the configured pull-request command once; what it printed first.
    async fn pull_request(
        &self,
        away: &Path,
        branch: &Branch,
        remote: &str,
        message: &str,
        config: &HandOver,
    ) -> Result<Option<String>, String> {
        let title: String = message
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(MAX_TITLE)
            .collect();
        let body_file = away.join("pull-request.md");
        let body: String = message
            .lines()
            .skip(2)
            .filter(|l| !l.starts_with("Arbiter-"))
            .collect::<Vec<_>>()
            .join("\n");
        tokio::fs::write(&body_file, body.trim())
            .await
            .map_err(|e| format!("the pull request's body could not be written: {e}"))?;
        let body_file = body_file.to_string_lossy().into_owned();
        let argv: Vec<String> = config
            .pull_request
            .iter()
            .map(|arg| {
                arg.replace("{branch}", &branch.name)
                    .replace("{title}", &title)
                    .replace("{body_file}", &body_file)
                    .replace("{remote}", remote)
            })
            .collect();
        let (program, args) = argv.split_first().ok_or("no pull-request command")?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(&self.workspace)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        user_env(&mut cmd, config);
        let out = tokio::time::timeout(HAND_OVER_TIMEOUT, cmd.output())
            .await
            .map_err(|_| {
                format!("the pull-request command took longer than {HAND_OVER_TIMEOUT:?}")
            })?
            .map_err(|e| format!("the pull-request command {program} did not start: {e}"))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "the pull-request command failed ({}): {}",
                out.status,
                clean(said.trim()).chars().take(500).collect::<String>()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| clean(l.trim()))
            .find(|l| !l.is_empty())
            .map(|l| l.chars().take(300).collect()))
    }
}

/// git as the worker itself, in a repository of its own (`dir`), with the
/// user's environment for credentials and no prompt.
async fn own_git(args: &[&str], dir: Option<&Path>, config: &HandOver) -> Result<Vec<u8>, String> {
    let mut cmd = tokio::process::Command::new("git");
    if let Some(dir) = dir {
        cmd.arg("-C").arg(dir);
    }
    cmd.args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    user_env(&mut cmd, config);
    cmd.env("GIT_TERMINAL_PROMPT", "0");
    let what = args
        .iter()
        .find(|a| !a.starts_with('-') && !a.contains('='))
        .copied()
        .unwrap_or("git");
    let out = tokio::time::timeout(HAND_OVER_TIMEOUT, cmd.output())
        .await
        .map_err(|_| format!("git {what} took longer than {HAND_OVER_TIMEOUT:?}"))?
        .map_err(|e| format!("git {what} did not start: {e}"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "git {what} failed ({}): {}",
            out.status,
            clean(said.trim())
        ));
    }
    Ok(out.stdout)
}

/// The push's and the pull-request command's environment: the PATH, HOME,
/// LANG and ssh agent, and what `pass_env` names; none of the worker's
/// other variables (its model keys, its NATS credential).
fn user_env(cmd: &mut tokio::process::Command, config: &HandOver) {
    cmd.env_clear();
    let fixed = ["PATH", "HOME", "LANG", "SSH_AUTH_SOCK"];
    for name in fixed
        .iter()
        .copied()
        .chain(config.pass_env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
}

/// A URL as it may be shown: without the user and password in it.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{path}"),
        None => url.to_owned(),
    }
}

/// Text without terminal escapes and control characters, but newlines and
/// tabs.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            // An escape sequence: `ESC [ … final`, or `ESC` and one more.
            '\x1b' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// The handoff packet as the branch's message says it.
fn packet_text(packet: &Handoff) -> String {
    let mut text = String::from("Handoff:\n");
    for done in &packet.done {
        text.push_str(&format!("- done {}: {}", done.id, done.what));
        if !done.files.is_empty() {
            text.push_str(&format!(" ({})", done.files.join(", ")));
        }
        text.push('\n');
    }
    for open in &packet.open {
        text.push_str(&format!("- open {}: {}\n", open.id, open.what));
    }
    for decision in &packet.decisions {
        text.push_str(&format!(
            "- decided: {} ({})\n",
            decision.decision, decision.why
        ));
    }
    for question in &packet.questions {
        text.push_str(&format!("- question: {question}\n"));
    }
    if !packet.next_step.trim().is_empty() {
        text.push_str(&format!("- next step: {}\n", packet.next_step.trim()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_the_model_wrote_are_dropped() {
        assert_eq!(
            clean("a\x1b[31mred\x1b[0m\x07 b\n\tc\x1b]x"),
            "ared b\n\tcx"
        );
    }

    #[test]
    fn credentials_in_a_url_are_not_shown() {
        assert_eq!(
            redact("https://user:tok@example.com/r.git"),
            "https://***@example.com/r.git"
        );
        assert_eq!(
            redact("https://example.com/r.git"),
            "https://example.com/r.git"
        );
        assert_eq!(redact("https://example.com/a@b"), "https://example.com/a@b");
        assert_eq!(redact("/srv/git/r.git"), "/srv/git/r.git");
        assert_eq!(redact("git@github.com:o/r.git"), "git@github.com:o/r.git");
    }

    #[test]
    fn the_config_table_is_read_and_its_mistakes_named() {
        let table: toml::Table = toml::from_str(
            r#"push = "origin"
pull_request = ["gh", "pr", "create", "--head", "{branch}"]
pass_env = ["GH_TOKEN"]"#,
        )
        .unwrap();
        let read = HandOver::parse(&table).unwrap();
        assert_eq!(read.push.as_deref(), Some("origin"));
        assert_eq!(read.pull_request.len(), 5);
        assert_eq!(read.pass_env, ["GH_TOKEN"]);
        for (bad, said) in [
            ("force = true", "[checkpoints] force: unknown key"),
            ("push = 1", "[checkpoints] push: expected"),
            ("pull_request = [\"gh\"]", "pull_request needs push"),
            (
                "push = \"o\"\npull_request = \"gh\"",
                "expected a list of strings",
            ),
        ] {
            let table: toml::Table = toml::from_str(bad).unwrap();
            let err = HandOver::parse(&table).unwrap_err();
            assert!(err.contains(said), "{bad}: {err}");
        }
    }
}
