//! The workspace as a list of files with their size and modification time,
//! walked when an Orchestrator starts (its baseline, stored with its state)
//! and again at each output, and the difference between two walks.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::UNIX_EPOCH;

use arbiter_protocol::FileChanges;
use arbiter_protocol::evidence::{MAX_FILES_LISTED, clip_item};
use serde::{Deserialize, Serialize};

/// Entries (files and directories) a walk visits at most; a larger
/// workspace is compared in part.
pub(crate) const MAX_WALK_ENTRIES: usize = 20_000;
/// Directories never walked: version control, dependencies, build output.
/// What changes inside them is not what a report is about, and they can be huge.
pub(crate) const SKIPPED_DIRS: [&str; 6] = [
    ".git",
    "node_modules",
    "target",
    ".venv",
    "venv",
    "__pycache__",
];

/// A file as a walk saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Stamp {
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

/// One walk of a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Walk {
    /// Files (and symlinks, not followed) by path relative to the root.
    pub files: BTreeMap<String, Stamp>,
    /// The walk stopped at [`MAX_WALK_ENTRIES`].
    #[serde(default)]
    pub partial: bool,
}

/// What an Orchestrator's outputs compare the workspace against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Baseline {
    #[serde(flatten)]
    pub walk: Walk,
    /// Walked when a worker took the Orchestrator over and found none
    /// stored, rather than at the summons.
    #[serde(default)]
    pub at_takeover: bool,
}

/// Walks `root` (depth first, in name order, symlinks not followed),
/// skipping [`SKIPPED_DIRS`], visiting at most `max` entries.
pub(crate) fn walk(root: &Path, max: usize) -> Walk {
    let mut out = Walk::default();
    let mut visited = 0usize;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        // Pushed in reverse so that the first name is walked first.
        let mut subdirs = Vec::new();
        for entry in entries {
            if visited >= max {
                out.partial = true;
                return out;
            }
            visited += 1;
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                let name = entry.file_name();
                if !SKIPPED_DIRS.iter().any(|s| name == *s) {
                    subdirs.push(entry.path());
                }
                continue;
            }
            let Ok(relative) = entry.path().strip_prefix(root).map(Path::to_path_buf) else {
                continue;
            };
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
            out.files.insert(
                relative.to_string_lossy().into_owned(),
                Stamp {
                    size: meta.len(),
                    mtime_ns,
                },
            );
        }
        dirs.extend(subdirs.into_iter().rev());
    }
    out
}

/// What changed from `before` to `now`, listed within [`MAX_FILES_LISTED`]
/// (created first, then changed, then deleted). When either walk is
/// partial, deletions cannot be told from files the walk did not reach, so
/// none is reported.
pub(crate) fn diff(before: &Baseline, now: &Walk) -> FileChanges {
    let partial = before.walk.partial || now.partial;
    let mut created = Vec::new();
    let mut changed = Vec::new();
    for (path, stamp) in &now.files {
        match before.walk.files.get(path) {
            None => created.push(path),
            Some(old) if old != stamp => changed.push(path),
            Some(_) => {}
        }
    }
    let deleted: Vec<&String> = if partial {
        Vec::new()
    } else {
        before
            .walk
            .files
            .keys()
            .filter(|p| !now.files.contains_key(*p))
            .collect()
    };
    let mut room = MAX_FILES_LISTED;
    let mut more = 0u64;
    let mut list = |paths: Vec<&String>| -> Vec<String> {
        let shown = paths.len().min(room);
        room -= shown;
        more += (paths.len() - shown) as u64;
        paths
            .into_iter()
            .take(shown)
            .map(|p| clip_item(p))
            .collect()
    };
    let created = list(created);
    let changed = list(changed);
    let deleted = list(deleted);
    FileChanges {
        created,
        changed,
        deleted,
        more,
        partial,
        since_takeover: before.at_takeover,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(root: &Path) -> Baseline {
        Baseline {
            walk: walk(root, MAX_WALK_ENTRIES),
            at_takeover: false,
        }
    }

    #[test]
    fn created_changed_and_deleted_files_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "same").unwrap();
        std::fs::write(root.join("edit.txt"), "before").unwrap();
        std::fs::write(root.join("gone.txt"), "x").unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::create_dir_all(root.join("src/target")).unwrap();
        let before = baseline(root);
        assert_eq!(
            before.walk.files.keys().collect::<Vec<_>>(),
            ["edit.txt", "gone.txt", "keep.txt"]
        );

        std::fs::write(root.join("edit.txt"), "after, longer").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::write(root.join("src/new.py"), "print(1)").unwrap();
        // Inside skipped directories: not seen.
        std::fs::write(root.join(".git/objects/ab"), "blob").unwrap();
        std::fs::write(root.join("src/target/out.o"), "obj").unwrap();
        let changes = diff(&before, &walk(root, MAX_WALK_ENTRIES));
        assert_eq!(
            changes,
            FileChanges {
                created: vec!["src/new.py".into()],
                changed: vec!["edit.txt".into()],
                deleted: vec!["gone.txt".into()],
                more: 0,
                partial: false,
                since_takeover: false,
            }
        );
        // Nothing changed since: nothing listed.
        let now = walk(root, MAX_WALK_ENTRIES);
        let again = Baseline {
            walk: now.clone(),
            at_takeover: true,
        };
        let none = diff(&again, &now);
        assert_eq!(none.count(), 0);
        assert!(none.since_takeover);
    }

    #[test]
    fn lists_are_bounded_and_the_rest_counted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let before = baseline(root);
        for i in 0..(MAX_FILES_LISTED + 5) {
            std::fs::write(root.join(format!("f{i:03}")), "x").unwrap();
        }
        let changes = diff(&before, &walk(root, MAX_WALK_ENTRIES));
        assert_eq!(changes.created.len(), MAX_FILES_LISTED);
        assert_eq!(changes.created[0], "f000");
        assert_eq!(changes.more, 5);
        assert_eq!(changes.count(), (MAX_FILES_LISTED + 5) as u64);
    }

    #[test]
    fn a_walk_past_its_bound_is_partial_and_reports_no_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..10 {
            std::fs::write(root.join(format!("f{i}")), "x").unwrap();
        }
        let before = Baseline {
            walk: walk(root, 4),
            at_takeover: false,
        };
        assert!(before.walk.partial);
        assert_eq!(before.walk.files.len(), 4);
        // A file the bounded walk never saw is not "deleted", nor one it
        // no longer reaches.
        std::fs::remove_file(root.join("f0")).unwrap();
        let changes = diff(&before, &walk(root, 4));
        assert!(changes.partial);
        assert!(changes.deleted.is_empty(), "{changes:?}");
        assert_eq!(changes.created, ["f4"]);
    }

    #[test]
    fn a_baseline_round_trips_through_json() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "x").unwrap();
        let before = baseline(dir.path());
        let json = serde_json::to_string(&before).unwrap();
        let back: Baseline = serde_json::from_str(&json).unwrap();
        assert_eq!(back, before);
    }
}
