//! The file tools: `read` (numbered lines, ranges), `write` (create or
//! replace) and `edit` (exact, unique string replacement). Every path goes
//! through [`Workspace::resolve`] and is refused if it leads outside.

use std::fmt::Write as _;

use arbiter_llm::ToolSpec;
use arbiter_llm::schema;
use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolOutcome;
use crate::workspace::Workspace;

/// Lines `read` returns when no `limit` is given.
pub const READ_DEFAULT_LINES: usize = 2000;
/// Characters of one line `read` shows; the rest is cut with a marker.
pub const READ_MAX_LINE_CHARS: usize = 2000;
/// A file with a NUL byte in its first this many bytes is taken for binary.
const BINARY_SNIFF: usize = 8192;
/// The largest file `read` and `edit` take whole (a worker host's memory is
/// shared by every Orchestrator on it).
const MAX_TEXT_BYTES: u64 = 16 * 1024 * 1024;

pub(super) fn read_spec() -> ToolSpec {
    ToolSpec {
        name: "read".into(),
        description: format!(
            "Read a text file of the workspace. Lines come numbered from 1 (`number<TAB>text`). \
             Without `offset`/`limit` it returns the first {READ_DEFAULT_LINES} lines and says \
             how to read on; lines longer than {READ_MAX_LINE_CHARS} characters are cut. \
             Binary files and directories are refused (use `glob` to list a directory)."
        ),
        input_schema: schema::for_model::<ReadInput>(),
    }
}

pub(super) fn write_spec() -> ToolSpec {
    ToolSpec {
        name: "write".into(),
        description: "Create a file of the workspace, or replace its whole content. Missing \
                      parent directories are created. To change part of an existing file, \
                      prefer `edit`."
            .into(),
        input_schema: schema::for_model::<WriteInput>(),
    }
}

pub(super) fn edit_spec() -> ToolSpec {
    ToolSpec {
        name: "edit".into(),
        description: "Replace an exact piece of text in a file of the workspace. `old_string` \
                      must match the file exactly (whitespace and indentation included) and \
                      exactly once, unless `replace_all` is true; otherwise the edit is refused \
                      with the number of matches and nothing changes. Read the file first."
            .into(),
        input_schema: schema::for_model::<EditInput>(),
    }
}

/// The `read` tool's input; its JSON Schema is the tool's input schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadInput {
    /// File path, relative to the workspace.
    path: String,
    /// First line to read (1-based). Default 1.
    offset: Option<usize>,
    #[schemars(extend("description" = format!("Number of lines to read. Default {READ_DEFAULT_LINES}.")))]
    limit: Option<usize>,
}

/// The `write` tool's input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteInput {
    /// File path, relative to the workspace.
    path: String,
    /// The whole new content of the file.
    content: String,
}

/// The `edit` tool's input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EditInput {
    /// File path, relative to the workspace.
    path: String,
    /// The exact text to replace; include enough context to make it unique.
    old_string: String,
    /// The text to put in its place.
    new_string: String,
    /// Replace every occurrence instead of exactly one. Default false.
    #[serde(default)]
    replace_all: bool,
}

/// Reads a text file as UTF-8, with errors worded for the model.
async fn read_text(workspace: &Workspace, path: &str) -> Result<String, ToolOutcome> {
    let resolved = workspace
        .resolve(path)
        .map_err(|e| ToolOutcome::error(e.to_string()))?;
    if resolved.is_dir() {
        return Err(ToolOutcome::error(format!(
            "{path} is a directory; use glob to list it"
        )));
    }
    let meta = tokio::fs::metadata(&resolved)
        .await
        .map_err(|e| ToolOutcome::error(format!("{path}: {e}")))?;
    // A FIFO or a device would block the read, or never end.
    if !meta.is_file() {
        return Err(ToolOutcome::error(format!(
            "{path} is not a regular file (a pipe, socket or device); only files can be read"
        )));
    }
    if meta.len() > MAX_TEXT_BYTES {
        return Err(ToolOutcome::error(format!(
            "{path} is {} MiB, more than the {} MiB this tool reads whole; \
             look into it with grep, or with bash (head, tail, sed -n)",
            meta.len().div_ceil(1024 * 1024),
            MAX_TEXT_BYTES / (1024 * 1024)
        )));
    }
    let bytes = tokio::fs::read(&resolved)
        .await
        .map_err(|e| ToolOutcome::error(format!("{path}: {e}")))?;
    if bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0) {
        return Err(ToolOutcome::error(format!(
            "{path} looks like a binary file ({} bytes); only text files can be read",
            bytes.len()
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| ToolOutcome::error(format!("{path} is not valid UTF-8 text")))
}

pub(super) async fn read(workspace: &Workspace, input: ReadInput) -> ToolOutcome {
    let text = match read_text(workspace, &input.path).await {
        Ok(text) => text,
        Err(error) => return error,
    };
    let total = text.lines().count();
    if total == 0 {
        return ToolOutcome::ok(format!("{} is empty", input.path));
    }
    let first = input.offset.unwrap_or(1).max(1);
    if first > total {
        return ToolOutcome::error(format!(
            "{} has {total} lines; there is no line {first}",
            input.path
        ));
    }
    let limit = input.limit.unwrap_or(READ_DEFAULT_LINES).max(1);
    let mut out = String::new();
    let mut last = first;
    for (i, line) in text.lines().enumerate().skip(first - 1).take(limit) {
        last = i + 1;
        match line.char_indices().nth(READ_MAX_LINE_CHARS) {
            Some((cut, _)) => {
                let _ = writeln!(out, "{last:>6}\t{} [… line cut]", &line[..cut]);
            }
            None => {
                let _ = writeln!(out, "{last:>6}\t{line}");
            }
        }
    }
    if last < total {
        let _ = writeln!(
            out,
            "[… lines {}–{total} not shown; read again with offset {}]",
            last + 1,
            last + 1
        );
    }
    ToolOutcome::ok(out)
}

pub(super) async fn write(workspace: &Workspace, input: WriteInput) -> ToolOutcome {
    let path = match workspace.resolve(&input.path) {
        Ok(path) => path,
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    if path.is_dir() {
        return ToolOutcome::error(format!("{} is a directory", input.path));
    }
    if let Some(parent) = path.parent()
        && let Err(e) = tokio::fs::create_dir_all(parent).await
    {
        return ToolOutcome::error(format!("{}: {e}", input.path));
    }
    match tokio::fs::write(&path, input.content.as_bytes()).await {
        Ok(()) => ToolOutcome::ok(format!(
            "wrote {} bytes to {}",
            input.content.len(),
            workspace.display(&path)
        )),
        Err(e) => ToolOutcome::error(format!("{}: {e}", input.path)),
    }
}

/// The 1-based line on which byte `at` of `text` lies.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

pub(super) async fn edit(workspace: &Workspace, input: EditInput) -> ToolOutcome {
    let path = &input.path;
    if input.old_string.is_empty() {
        return ToolOutcome::error(format!(
            "edit {path}: old_string is empty; give the exact text to replace (use write to create a file)"
        ));
    }
    if input.old_string == input.new_string {
        return ToolOutcome::error(format!(
            "edit {path}: old_string and new_string are the same; nothing would change"
        ));
    }
    let resolved = match workspace.resolve(path) {
        Ok(resolved) => resolved,
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    if !resolved.exists() {
        return ToolOutcome::error(format!("edit {path}: no such file; use write to create it"));
    }
    let text = match read_text(workspace, path).await {
        Ok(text) => text,
        Err(error) => return error,
    };
    let starts: Vec<usize> = text
        .match_indices(&input.old_string)
        .map(|(at, _)| at)
        .collect();
    let lines: Vec<String> = starts
        .iter()
        .take(10)
        .map(|&at| line_of(&text, at).to_string())
        .collect();
    match starts.len() {
        0 => {
            return ToolOutcome::error(format!(
                "edit {path}: old_string was not found. It must match the file exactly, \
                 whitespace and indentation included; read the file and copy the text"
            ));
        }
        1 => {}
        n if !input.replace_all => {
            return ToolOutcome::error(format!(
                "edit {path}: old_string occurs {n} times (lines {}); include more of the \
                 surrounding text so that it matches exactly once, or set replace_all",
                lines.join(", ")
            ));
        }
        _ => {}
    }
    let updated = text.replace(&input.old_string, &input.new_string);
    if let Err(e) = tokio::fs::write(&resolved, updated.as_bytes()).await {
        return ToolOutcome::error(format!("edit {path}: {e}"));
    }
    let shown = workspace.display(&resolved);
    match starts.len() {
        1 => ToolOutcome::ok(format!(
            "edited {shown}: replaced 1 occurrence at line {}",
            lines[0]
        )),
        n => ToolOutcome::ok(format!("edited {shown}: replaced {n} occurrences")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::run;
    use crate::tools::tests::context;

    #[tokio::test]
    async fn write_then_read_with_ranges() {
        let (_base, ctx) = context();
        let w = run(
            &ctx,
            "write",
            &json!({"path": "a/b.txt", "content": "one\ntwo\nthree\n"}),
        )
        .await;
        assert_eq!(w.content, "wrote 14 bytes to a/b.txt");
        let r = run(
            &ctx,
            "read",
            &json!({"path": "a/b.txt", "offset": 2, "limit": 1}),
        )
        .await;
        assert_eq!(
            r.content,
            "     2\ttwo\n[… lines 3–3 not shown; read again with offset 3]\n"
        );
        let all = run(&ctx, "read", &json!({"path": "a/b.txt"})).await;
        assert_eq!(all.content, "     1\tone\n     2\ttwo\n     3\tthree\n");
        let past = run(&ctx, "read", &json!({"path": "a/b.txt", "offset": 9})).await;
        assert!(
            past.is_error && past.content.contains("has 3 lines"),
            "{past:?}"
        );
        let dir = run(&ctx, "read", &json!({"path": "a"})).await;
        assert!(dir.is_error && dir.content.contains("use glob"), "{dir:?}");
        let missing = run(&ctx, "read", &json!({"path": "nope"})).await;
        assert!(missing.is_error);
    }

    #[tokio::test]
    async fn long_lines_and_binary_files() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        std::fs::write(root.join("long.txt"), "x".repeat(5000)).unwrap();
        std::fs::write(root.join("bin"), [0u8, 1, 2, 3]).unwrap();
        let long = run(&ctx, "read", &json!({"path": "long.txt"})).await;
        assert!(
            long.content.ends_with("[… line cut]\n"),
            "{}",
            &long.content[..40]
        );
        assert!(long.content.len() < 2100);
        let bin = run(&ctx, "read", &json!({"path": "bin"})).await;
        assert!(bin.is_error && bin.content.contains("binary"), "{bin:?}");
    }

    #[tokio::test]
    async fn files_too_large_or_not_regular_are_refused_with_what_to_do_instead() {
        let (_base, ctx) = context();
        let big = ctx.workspace.root().join("big.log");
        let file = std::fs::File::create(&big).unwrap();
        // Sparse: no disk or memory is spent on it.
        file.set_len(super::MAX_TEXT_BYTES + 1).unwrap();
        for tool in ["read", "edit"] {
            let input = match tool {
                "read" => json!({"path": "big.log"}),
                _ => json!({"path": "big.log", "old_string": "a", "new_string": "b"}),
            };
            let refused = run(&ctx, tool, &input).await;
            assert!(refused.is_error, "{tool}: {refused:?}");
            assert_eq!(
                refused.content,
                "big.log is 17 MiB, more than the 16 MiB this tool reads whole; \
                 look into it with grep, or with bash (head, tail, sed -n)",
                "{tool}"
            );
        }
        let fifo = ctx.workspace.root().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let refused = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            run(&ctx, "read", &json!({"path": "pipe"})),
        )
        .await
        .expect("reading a FIFO must not block");
        assert_eq!(
            refused.content,
            "pipe is not a regular file (a pipe, socket or device); only files can be read"
        );
    }

    #[tokio::test]
    async fn edit_replaces_exactly_one_match_or_explains() {
        let (_base, ctx) = context();
        let file = ctx.workspace.root().join("lib.rs");
        std::fs::write(&file, "fn a() {}\nfn b() {}\nfn b() {}\n").unwrap();
        let edit =
            |old: &str, new: &str| json!({"path": "lib.rs", "old_string": old, "new_string": new});

        let one = run(&ctx, "edit", &edit("fn a()", "fn alpha()")).await;
        assert_eq!(
            one.content,
            "edited lib.rs: replaced 1 occurrence at line 1"
        );
        assert!(!one.is_error);

        let none = run(&ctx, "edit", &edit("fn c()", "x")).await;
        assert!(
            none.is_error && none.content.contains("was not found"),
            "{none:?}"
        );

        let many = run(&ctx, "edit", &edit("fn b()", "fn beta()")).await;
        assert!(many.is_error, "{many:?}");
        assert!(
            many.content.contains("occurs 2 times (lines 2, 3)"),
            "{many:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "fn alpha() {}\nfn b() {}\nfn b() {}\n",
            "a refused edit changes nothing"
        );

        let mut all = edit("fn b()", "fn beta()");
        all["replace_all"] = json!(true);
        let all = run(&ctx, "edit", &all).await;
        assert_eq!(all.content, "edited lib.rs: replaced 2 occurrences");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "fn alpha() {}\nfn beta() {}\nfn beta() {}\n"
        );

        for (old, new, says) in [("", "x", "is empty"), ("fn", "fn", "the same")] {
            let out = run(&ctx, "edit", &edit(old, new)).await;
            assert!(out.is_error && out.content.contains(says), "{out:?}");
        }
        let missing = run(
            &ctx,
            "edit",
            &json!({"path": "new.rs", "old_string": "a", "new_string": "b"}),
        )
        .await;
        assert!(
            missing.is_error && missing.content.contains("use write"),
            "{missing:?}"
        );
    }

    #[tokio::test]
    async fn escapes_are_refused_by_every_file_tool() {
        let (_base, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path(), ctx.workspace.root().join("door")).unwrap();
        let calls = [
            ("read", json!({"path": "../x"})),
            ("read", json!({"path": "door/secret.txt"})),
            ("read", json!({"path": "/etc/passwd"})),
            ("write", json!({"path": "../../x", "content": ""})),
            ("write", json!({"path": "door/new.txt", "content": "x"})),
            (
                "edit",
                json!({"path": "door/secret.txt", "old_string": "secret", "new_string": "x"}),
            ),
        ];
        for (tool, input) in calls {
            let out = run(&ctx, tool, &input).await;
            assert!(
                out.is_error && out.content.contains("outside the workspace"),
                "{tool} {input}: {out:?}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
            "secret"
        );
        assert!(!outside.path().join("new.txt").exists());
    }
}
