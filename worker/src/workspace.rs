//! A session's workspace directory, and the rule every file tool obeys: a
//! path must resolve inside it, through `..` and symlinks alike.

use std::path::{Component, Path, PathBuf};

/// A workspace root, canonicalised once.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens (creating if needed) the directory `name` under `base`.
    pub fn open(base: &Path, name: &str) -> Result<Self, String> {
        if !arbiter_protocol::subjects::is_valid_token(name) {
            return Err(format!("workspace name {name:?} is not a plain name"));
        }
        let dir = base.join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let root = dir
            .canonicalize()
            .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path a tool was given. Relative paths are taken from the
    /// root; absolute ones must already lie inside it. The existing part of
    /// the path is resolved through symlinks and must stay inside too.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        if path.trim().is_empty() {
            return Err("the path is empty".into());
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
                        return Err(self.outside(path));
                    }
                }
                Component::CurDir => {}
                other => clean.push(other),
            }
        }
        if !clean.starts_with(&self.root) {
            return Err(self.outside(path));
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
            .map_err(|_| format!("{path}: a symlink on this path points nowhere"))?;
        if !real.starts_with(&self.root) {
            return Err(self.outside(path));
        }
        Ok(clean)
    }

    fn outside(&self, path: &str) -> String {
        format!("{path}: refused, the path leads outside the workspace")
    }

    /// A path as the model should see it: relative to the root.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
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
        for bad in ["../s2/x", "a/../../x", "/etc/passwd", ""] {
            let err = ws.resolve(bad).unwrap_err();
            assert!(
                err.contains("outside") || err.contains("empty"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn symlinks_out_of_the_workspace_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = Workspace::open(base.path(), "s1").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join("door")).unwrap();
        let err = ws.resolve("door/secret.txt").unwrap_err();
        assert!(err.contains("outside"), "{err}");
        std::os::unix::fs::symlink("/nonexistent/zzz", ws.root().join("dangling")).unwrap();
        assert!(ws.resolve("dangling").is_err());
    }
}
