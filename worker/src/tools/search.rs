//! The search tools: `glob` (list a directory, or find files by pattern) and
//! `grep` (regex search of file contents). Both walk the workspace with the
//! `ignore` crate, so `.gitignore` and `.ignore` rules hold (with or without a
//! `.git` directory); `.git` itself is never entered and symlinks are never
//! followed, so a walk cannot leave the workspace.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use arbiter_llm::ToolSpec;
use arbiter_llm::schema;
use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolOutcome};
use crate::workspace::Workspace;

/// Paths `glob` returns at most.
pub const GLOB_MAX_RESULTS: usize = 500;
/// Matching lines `grep` returns by default, and at most.
pub const GREP_DEFAULT_MATCHES: usize = 200;
pub const GREP_MAX_MATCHES: usize = 2000;
/// Characters of a matching line `grep` shows.
const GREP_LINE_CHARS: usize = 300;
/// Files larger than this are not searched.
const GREP_MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

pub(super) fn glob_spec() -> ToolSpec {
    ToolSpec {
        name: "glob".into(),
        description: format!(
            "List a directory of the workspace, or find files by glob pattern. Without \
             `pattern` it lists the entries of `path` (directories end in `/`). With `pattern` \
             it searches below `path` and returns matching file paths, relative to the \
             workspace, sorted. Patterns match the path relative to `path`: `*` stays within \
             one directory, `**` crosses directories (`**/*.rs`, `src/**/mod.rs`, \
             `*.{{js,ts}}`). Files ignored by .gitignore are skipped. At most \
             {GLOB_MAX_RESULTS} paths."
        ),
        input_schema: schema::for_model::<GlobInput>(),
    }
}

pub(super) fn grep_spec() -> ToolSpec {
    ToolSpec {
        name: "grep".into(),
        description: format!(
            "Search file contents of the workspace with a regular expression (Rust regex \
             syntax). Returns `path:line: text` for each matching line, paths relative to the \
             workspace. Searches below `path` (a directory or one file); files ignored by \
             .gitignore and binary files are skipped. `glob` narrows the files searched \
             (`*.rs` matches file names; a pattern with `/` matches paths). At most \
             {GREP_DEFAULT_MATCHES} lines unless `max_matches` says otherwise (up to \
             {GREP_MAX_MATCHES})."
        ),
        input_schema: schema::for_model::<GrepInput>(),
    }
}

/// The `glob` tool's input; its JSON Schema is the tool's input schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GlobInput {
    /// Glob pattern, e.g. `**/*.rs`. Omit to list the directory.
    pattern: Option<String>,
    /// Directory to list or search, relative to the workspace. Default: the workspace root.
    path: Option<String>,
}

/// The `grep` tool's input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GrepInput {
    /// Regular expression to find, e.g. `fn\s+main`.
    pattern: String,
    /// Directory or file to search, relative to the workspace. Default: the workspace root.
    path: Option<String>,
    /// Only search files matching this glob, e.g. `*.rs`.
    glob: Option<String>,
    /// Ignore case. Default false.
    #[serde(default)]
    case_insensitive: bool,
    /// Most matching lines to return.
    max_matches: Option<usize>,
}

/// Every file below `target` the workspace's ignore rules let through, in
/// path order; stops early when `keep_going` says so.
fn walk_files(
    root: &Path,
    target: &Path,
    ctx: &ToolContext,
    mut visit: impl FnMut(&Path) -> bool,
) -> Result<(), String> {
    let scope = target.to_path_buf();
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .parents(false)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_path(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            let path = entry.path();
            // Only the way down to the target, and what lies below it.
            entry.file_name() != ".git" && (scope.starts_with(path) || path.starts_with(&scope))
        });
    for entry in builder.build() {
        if ctx.cancel.is_cancelled() {
            return Err("cancelled".into());
        }
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_some_and(|t| t.is_file())
            && entry.path().starts_with(target)
            && !visit(entry.path())
        {
            break;
        }
    }
    Ok(())
}

/// Resolves an optional directory argument.
fn resolve_dir(workspace: &Workspace, path: Option<&str>) -> Result<PathBuf, ToolOutcome> {
    let given = path.unwrap_or(".");
    let dir = workspace
        .resolve(given)
        .map_err(|e| ToolOutcome::error(e.to_string()))?;
    // Walks never follow links, so walk the real directory a link inside names.
    let dir = dir.canonicalize().unwrap_or(dir);
    if !dir.is_dir() {
        return Err(ToolOutcome::error(format!("{given}: no such directory")));
    }
    Ok(dir)
}

fn matcher(pattern: &str) -> Result<GlobMatcher, ToolOutcome> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolOutcome::error(format!("invalid glob pattern {pattern:?}: {e}")))
}

pub(super) async fn glob(ctx: &ToolContext, input: GlobInput) -> ToolOutcome {
    let ctx = ctx.clone();
    run_blocking(move || glob_blocking(&ctx, input)).await
}

fn glob_blocking(ctx: &ToolContext, input: GlobInput) -> ToolOutcome {
    let workspace = &ctx.workspace;
    let dir = match resolve_dir(workspace, input.path.as_deref()) {
        Ok(dir) => dir,
        Err(error) => return error,
    };
    let shown_dir = match workspace.display(&dir) {
        s if s.is_empty() => ".".to_owned(),
        s => s,
    };
    let Some(pattern) = input.pattern.filter(|p| !p.is_empty()) else {
        return list_dir(&dir, &shown_dir);
    };
    let glob = match matcher(pattern.trim_start_matches("./")) {
        Ok(glob) => glob,
        Err(error) => return error,
    };
    let mut found = Vec::new();
    let mut more = 0usize;
    let walked = walk_files(workspace.root(), &dir, ctx, |path| {
        let relative = path.strip_prefix(&dir).unwrap_or(path);
        if glob.is_match(relative) {
            if found.len() < GLOB_MAX_RESULTS {
                found.push(workspace.display(path));
            } else {
                more += 1;
            }
        }
        true
    });
    if let Err(e) = walked {
        return ToolOutcome::error(format!("glob: {e}"));
    }
    if found.is_empty() {
        return ToolOutcome::ok(format!("no files match {pattern:?} in {shown_dir}"));
    }
    let mut out = found.join("\n");
    out.push('\n');
    if more > 0 {
        let _ = writeln!(out, "[… {more} more paths not shown; narrow the pattern]");
    }
    ToolOutcome::ok(out)
}

fn list_dir(dir: &Path, shown: &str) -> ToolOutcome {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return ToolOutcome::error(format!("{shown}: {e}")),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(t) if t.is_dir() => format!("{name}/"),
                Ok(t) if t.is_symlink() => format!("{name}@"),
                _ => name,
            }
        })
        .collect();
    names.sort();
    if names.is_empty() {
        return ToolOutcome::ok(format!("{shown} is empty"));
    }
    let more = names.len().saturating_sub(GLOB_MAX_RESULTS);
    names.truncate(GLOB_MAX_RESULTS);
    let mut out = names.join("\n");
    out.push('\n');
    if more > 0 {
        let _ = writeln!(out, "[… {more} more entries not shown]");
    }
    ToolOutcome::ok(out)
}

pub(super) async fn grep(ctx: &ToolContext, input: GrepInput) -> ToolOutcome {
    let ctx = ctx.clone();
    run_blocking(move || grep_blocking(&ctx, input)).await
}

fn grep_blocking(ctx: &ToolContext, input: GrepInput) -> ToolOutcome {
    let workspace = &ctx.workspace;
    let regex = match RegexBuilder::new(&input.pattern)
        .case_insensitive(input.case_insensitive)
        .build()
    {
        Ok(regex) => regex,
        Err(e) => return ToolOutcome::error(format!("grep: invalid regular expression: {e}")),
    };
    let given = input.path.as_deref().unwrap_or(".");
    let target = match workspace.resolve(given) {
        Ok(target) => target,
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    let Ok(target) = target.canonicalize() else {
        return ToolOutcome::error(format!("{given}: no such file or directory"));
    };
    let filter = match input.glob.as_deref().map(|g| (matcher(g), g.contains('/'))) {
        None => None,
        Some((Ok(glob), by_path)) => Some((glob, by_path)),
        Some((Err(error), _)) => return error,
    };
    let limit = input
        .max_matches
        .unwrap_or(GREP_DEFAULT_MATCHES)
        .clamp(1, GREP_MAX_MATCHES);
    let mut search = Search {
        regex,
        limit,
        out: String::new(),
        found: 0,
        files: 0,
    };
    if target.is_file() {
        search.file(workspace, &target);
    } else {
        let walked = walk_files(workspace.root(), &target, ctx, |path| {
            let wanted = filter.as_ref().is_none_or(|(glob, by_path)| {
                if *by_path {
                    glob.is_match(path.strip_prefix(&target).unwrap_or(path))
                } else {
                    path.file_name().is_some_and(|name| glob.is_match(name))
                }
            });
            if wanted {
                search.file(workspace, path);
            }
            search.found <= search.limit
        });
        if let Err(e) = walked {
            return ToolOutcome::error(format!("grep: {e}"));
        }
    }
    if search.found == 0 {
        return ToolOutcome::ok(format!(
            "no matches for /{}/ in {given} ({} files searched)",
            input.pattern, search.files
        ));
    }
    let mut out = search.out;
    if search.found > search.limit {
        let _ = writeln!(
            out,
            "[… stopped after {} matching lines; narrow the pattern or the path]",
            search.limit
        );
    }
    ToolOutcome::ok(out)
}

struct Search {
    regex: Regex,
    limit: usize,
    out: String,
    /// Matching lines seen; one past `limit` means there were more.
    found: usize,
    files: usize,
}

impl Search {
    fn file(&mut self, workspace: &Workspace, path: &Path) {
        if std::fs::metadata(path).is_ok_and(|m| m.len() > GREP_MAX_FILE_BYTES) {
            return;
        }
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        if bytes[..bytes.len().min(8192)].contains(&0) {
            return;
        }
        self.files += 1;
        let text = String::from_utf8_lossy(&bytes);
        let shown = workspace.display(path);
        for (i, line) in text.lines().enumerate() {
            if !self.regex.is_match(line) {
                continue;
            }
            self.found += 1;
            if self.found > self.limit {
                return;
            }
            let line = match line.char_indices().nth(GREP_LINE_CHARS) {
                Some((cut, _)) => format!("{} [… cut]", &line[..cut]),
                None => line.to_owned(),
            };
            let _ = writeln!(self.out, "{shown}:{}: {line}", i + 1);
        }
    }
}

/// Runs filesystem work off the async threads.
async fn run_blocking(f: impl FnOnce() -> ToolOutcome + Send + 'static) -> ToolOutcome {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| ToolOutcome::error(format!("the search stopped unexpectedly: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::run;
    use crate::tools::tests::context;

    fn files(root: &std::path::Path, list: &[(&str, &str)]) {
        for (path, content) in list {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    #[tokio::test]
    async fn glob_lists_and_finds_respecting_gitignore() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        files(
            &root,
            &[
                (".gitignore", "target/\n*.log\n"),
                ("src/main.rs", "fn main() {}\n"),
                ("src/lib/mod.rs", "pub mod x;\n"),
                ("target/debug/out.rs", "generated\n"),
                ("run.log", "noise\n"),
                (".git/config", "[core]\n"),
                ("README.md", "# hi\n"),
            ],
        );
        let list = run(&ctx, "glob", &json!({})).await;
        assert_eq!(
            list.content,
            ".git/\n.gitignore\nREADME.md\nrun.log\nsrc/\ntarget/\n"
        );
        let sub = run(&ctx, "glob", &json!({"path": "src"})).await;
        assert_eq!(sub.content, "lib/\nmain.rs\n");
        let rs = run(&ctx, "glob", &json!({"pattern": "**/*.rs"})).await;
        assert_eq!(rs.content, "src/lib/mod.rs\nsrc/main.rs\n");
        let top = run(&ctx, "glob", &json!({"pattern": "*.rs", "path": "src"})).await;
        assert_eq!(top.content, "src/main.rs\n");
        let none = run(&ctx, "glob", &json!({"pattern": "*.py"})).await;
        assert_eq!(none.content, "no files match \"*.py\" in .");
        let escape = run(&ctx, "glob", &json!({"path": ".."})).await;
        assert!(escape.is_error && escape.content.contains("outside the workspace"));
        let bad = run(&ctx, "glob", &json!({"pattern": "a[", "path": "src"})).await;
        assert!(
            bad.is_error && bad.content.contains("invalid glob"),
            "{bad:?}"
        );
    }

    #[tokio::test]
    async fn grep_finds_lines_respecting_gitignore_and_limits() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        files(
            &root,
            &[
                (".gitignore", "target/\n"),
                ("src/a.rs", "fn main() {\n    todo!()\n}\n"),
                ("src/b.txt", "TODO: later\n"),
                ("target/x.rs", "todo!() in ignored\n"),
            ],
        );
        std::fs::write(root.join("src/blob.bin"), b"todo\0binary").unwrap();
        let all = run(
            &ctx,
            "grep",
            &json!({"pattern": "todo", "case_insensitive": true}),
        )
        .await;
        assert_eq!(
            all.content,
            "src/a.rs:2:     todo!()\nsrc/b.txt:1: TODO: later\n"
        );
        let rs = run(&ctx, "grep", &json!({"pattern": "todo", "glob": "*.rs"})).await;
        assert_eq!(rs.content, "src/a.rs:2:     todo!()\n");
        let one_file = run(
            &ctx,
            "grep",
            &json!({"pattern": "[{}]", "path": "src/a.rs"}),
        )
        .await;
        assert_eq!(one_file.content, "src/a.rs:1: fn main() {\nsrc/a.rs:3: }\n");
        let limited = run(&ctx, "grep", &json!({"pattern": ".", "max_matches": 2})).await;
        assert!(
            limited.content.contains("stopped after 2 matching lines"),
            "{limited:?}"
        );
        assert_eq!(limited.content.lines().count(), 3);
        let none = run(&ctx, "grep", &json!({"pattern": "zebra"})).await;
        assert!(!none.is_error && none.content.starts_with("no matches for /zebra/"));
        let bad = run(&ctx, "grep", &json!({"pattern": "(unclosed"})).await;
        assert!(bad.is_error && bad.content.contains("invalid regular expression"));
        let escape = run(&ctx, "grep", &json!({"pattern": "x", "path": "/etc"})).await;
        assert!(escape.is_error && escape.content.contains("outside the workspace"));
    }

    #[tokio::test]
    async fn walks_do_not_follow_symlinks_out() {
        let (_base, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.rs"), "needle\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), ctx.workspace.root().join("door")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.rs"),
            ctx.workspace.root().join("file.rs"),
        )
        .unwrap();
        let grep = run(&ctx, "grep", &json!({"pattern": "needle"})).await;
        assert!(grep.content.starts_with("no matches"), "{grep:?}");
        let glob = run(&ctx, "glob", &json!({"pattern": "**/*.rs"})).await;
        assert!(glob.content.starts_with("no files match"), "{glob:?}");
    }
}
