//! A session's workspace directory, and the rule every file tool obeys: a
//! path must resolve inside it, through `..` and symlinks alike.

use std::path::{Component, Path, PathBuf};

/// Why a path a tool was given is refused. The text is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty")]
    Empty,
    /// Through `..`, an absolute path or a symlink (the path as given).
    #[error("{0}: refused, the path leads outside the workspace")]
    Outside(String),
    #[error("{0}: a symlink on this path points nowhere")]
    Dangling(String),
}

/// Why a workspace cannot be opened or prepared.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("workspace name {0:?} is not a plain name")]
    NotPlainName(String),
    /// The file system refused `what` (create, resolve, read, copy) on `path`.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `map_err` for a file system call: what was done, on which path.
fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> OpenError {
    let path = path.to_path_buf();
    move |source| OpenError::Io { what, path, source }
}

/// A workspace root, canonicalised once.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens (creating if needed) the directory `name` under `base`.
    pub fn open(base: &Path, name: &str) -> Result<Self, OpenError> {
        if !arbiter_protocol::subjects::is_valid_token(name) {
            return Err(OpenError::NotPlainName(name.to_owned()));
        }
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let root = dir.canonicalize().map_err(io("resolve", &dir))?;
        Ok(Self { root })
    }

    /// Opens the workspace of member `member` of a team of session
    /// `session`: a directory of its own, `<session>.m<member>` beside the
    /// session's (a `.` never occurs in a session id, so it cannot be
    /// another session's). It is prepared once, from the session's
    /// workspace: a git worktree (detached at its `HEAD`) when that is a git
    /// repository with a commit, else a copy of its files (nothing, when the
    /// session has no workspace on this worker yet).
    pub fn open_member(base: &Path, session: &str, member: u32) -> Result<Self, OpenError> {
        if !arbiter_protocol::subjects::is_valid_token(session) {
            return Err(OpenError::NotPlainName(session.to_owned()));
        }
        let dir = base.join(member_dir(session, member));
        if !dir.exists() {
            prepare_member(&base.join(session), &dir)?;
        }
        let root = dir.canonicalize().map_err(io("resolve", &dir))?;
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path a tool was given. Relative paths are taken from the
    /// root; absolute ones must already lie inside it. The existing part of
    /// the path is resolved through symlinks and must stay inside too.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, PathError> {
        if path.trim().is_empty() {
            return Err(PathError::Empty);
        }
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        // Lexical normalisation: `..` may not climb above the root.
        let mut clean = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    if !clean.pop() || !clean.starts_with(&self.root) {
                        return Err(PathError::Outside(path.to_owned()));
                    }
                }
                Component::CurDir => {}
                other => clean.push(other),
            }
        }
        if !clean.starts_with(&self.root) {
            return Err(PathError::Outside(path.to_owned()));
        }
        // The deepest part that exists, with symlinks resolved, must stay inside.
        let mut existing = clean.as_path();
        loop {
            if existing.exists() || existing.symlink_metadata().is_ok() {
                break;
            }
            match existing.parent() {
                Some(parent) => existing = parent,
                None => break,
            }
        }
        let real = existing
            .canonicalize()
            .map_err(|_| PathError::Dangling(path.to_owned()))?;
        if !real.starts_with(&self.root) {
            return Err(PathError::Outside(path.to_owned()));
        }
        Ok(clean)
    }

    /// A path as the model should see it: relative to the root.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// The directory name of member `member`'s workspace in session `session`.
pub fn member_dir(session: &str, member: u32) -> String {
    format!("{session}.m{member}")
}

/// Held while a git worktree is added (see [`prepare_member`]).
static WORKTREE_ADD: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes `dir` from the session's workspace `from`: a git worktree when
/// `from` is a repository with a commit, else a copy.
fn prepare_member(from: &Path, dir: &Path) -> Result<(), OpenError> {
    if from.join(".git").exists() {
        // One `worktree add` at a time: the members of a team are prepared
        // at once, and git reads the other worktrees' directories while
        // another is half made (`failed to read .git/worktrees/…/commondir`).
        // Workers in other processes may add one at the same moment: a
        // failed attempt is tried again, twice, a moment later.
        let mut added;
        let mut attempt = 0;
        loop {
            added = {
                let _one = WORKTREE_ADD
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // Again: `-f`, as a failed attempt may have registered it.
                let force: &[&str] = if attempt > 0 { &["-f"] } else { &[] };
                std::process::Command::new("git")
                    .arg("-C")
                    .arg(from)
                    .args(["worktree", "add", "--detach", "--quiet"])
                    .args(force)
                    .arg(dir)
                    .arg("HEAD")
                    .stdin(std::process::Stdio::null())
                    .output()
            };
            attempt += 1;
            match &added {
                Ok(out) if !out.status.success() && attempt < 3 => {
                    let _ = std::fs::remove_dir_all(dir);
                    std::thread::sleep(std::time::Duration::from_millis(100 * attempt));
                }
                _ => break,
            }
        }
        match added {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => tracing::warn!(
                stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                "no git worktree for a team member; its workspace is a copy"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "git did not run; the member's workspace is a copy")
            }
        }
        // A failed attempt may leave a directory behind.
        let _ = std::fs::remove_dir_all(dir);
    }
    // Made under a temporary name and renamed, so a half copy is never taken for one.
    // Its own name (`<session>.m2.partial`): members are prepared at once.
    let mut partial = dir.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(io("create", &partial))?;
    if from.is_dir() {
        copy_tree(from, &partial)?;
    }
    std::fs::rename(&partial, dir).map_err(io("create", dir))
}

/// Copies the files under `from` into `to` (symlinks as symlinks).
fn copy_tree(from: &Path, to: &Path) -> Result<(), OpenError> {
    let entries = std::fs::read_dir(from).map_err(io("read", from))?;
    for entry in entries {
        let entry = entry.map_err(io("read", from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(io("read", &src))?;
        let copied = if kind.is_symlink() {
            std::fs::read_link(&src).and_then(|target| std::os::unix::fs::symlink(target, &dst))
        } else if kind.is_dir() {
            std::fs::create_dir_all(&dst).map_err(io("create", &dst))?;
            copy_tree(&src, &dst)?;
            Ok(())
        } else {
            std::fs::copy(&src, &dst).map(|_| ())
        };
        copied.map_err(io("copy", &src))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_resolve_and_escapes_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let ws = Workspace::open(base.path(), "s1").unwrap();
        assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
        assert_eq!(ws.resolve("./a/../c").unwrap(), ws.root().join("c"));
        let inside_abs = ws.root().join("x").display().to_string();
        assert!(ws.resolve(&inside_abs).is_ok());
        for bad in ["../s2/x", "a/../../x", "/etc/passwd"] {
            let err = ws.resolve(bad).unwrap_err();
            assert_eq!(err, PathError::Outside(bad.to_owned()));
            assert_eq!(
                err.to_string(),
                format!("{bad}: refused, the path leads outside the workspace")
            );
        }
        assert_eq!(ws.resolve(" ").unwrap_err(), PathError::Empty);
        // A session id that is not a plain name opens nothing.
        let err = Workspace::open(base.path(), "../s2").unwrap_err();
        assert!(
            matches!(&err, OpenError::NotPlainName(name) if name == "../s2"),
            "{err}"
        );
    }

    #[test]
    fn a_members_workspace_is_a_copy_of_the_sessions_and_its_own() {
        let base = tempfile::tempdir().unwrap();
        let ws = Workspace::open(base.path(), "s1").unwrap();
        std::fs::create_dir_all(ws.root().join("src")).unwrap();
        std::fs::write(ws.root().join("src/lib.rs"), "fn main() {}").unwrap();
        let one = Workspace::open_member(base.path(), "s1", 1).unwrap();
        let two = Workspace::open_member(base.path(), "s1", 2).unwrap();
        assert!(one.root().ends_with("s1.m1"), "{}", one.root().display());
        assert_eq!(
            std::fs::read_to_string(one.root().join("src/lib.rs")).unwrap(),
            "fn main() {}"
        );
        std::fs::write(one.root().join("mine.txt"), "1").unwrap();
        assert!(!two.root().join("mine.txt").exists());
        assert!(!ws.root().join("mine.txt").exists());
        // Opened again (a restarted worker): the same files, not a fresh copy.
        let again = Workspace::open_member(base.path(), "s1", 1).unwrap();
        assert!(again.root().join("mine.txt").exists());
        assert!(Workspace::open_member(base.path(), "../s1", 1).is_err());
        // Members prepared at the same moment never share a half copy.
        let root = base.path();
        let made: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (3..9)
                .map(|m| scope.spawn(move || Workspace::open_member(root, "s1", m)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, ws) in made.into_iter().enumerate() {
            let ws = ws.unwrap();
            assert!(ws.root().ends_with(format!("s1.m{}", i + 3)));
            assert!(ws.root().join("src/lib.rs").exists());
        }
    }

    #[test]
    fn a_members_workspace_is_a_git_worktree_when_the_sessions_is_a_repository() {
        let base = tempfile::tempdir().unwrap();
        let ws = Workspace::open(base.path(), "s2").unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(ws.root())
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        git(&["init", "-q"]);
        std::fs::write(ws.root().join("a.txt"), "a").unwrap();
        git(&["add", "a.txt"]);
        git(&["commit", "-q", "-m", "a"]);
        let one = Workspace::open_member(base.path(), "s2", 1).unwrap();
        assert_eq!(
            std::fs::read_to_string(one.root().join("a.txt")).unwrap(),
            "a"
        );
        // A worktree: its .git is a file pointing at the session's repository.
        assert!(one.root().join(".git").is_file());
    }

    #[test]
    fn symlinks_out_of_the_workspace_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = Workspace::open(base.path(), "s1").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join("door")).unwrap();
        let err = ws.resolve("door/secret.txt").unwrap_err();
        assert_eq!(err, PathError::Outside("door/secret.txt".into()));
        std::os::unix::fs::symlink("/nonexistent/zzz", ws.root().join("dangling")).unwrap();
        assert_eq!(
            ws.resolve("dangling").unwrap_err(),
            PathError::Dangling("dangling".into())
        );
    }
}
