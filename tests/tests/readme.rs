//! The README and the pages of `docs/` say only what works: every relative
//! link resolves to a file and every `#anchor` to a heading (GitHub's rules),
//! every fenced shell command that runs one of the project's binaries passes
//! only flags and subcommands its `--help` lists, and every `scripts/<name>`
//! they name exists. A failure names the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use arbiter_tests::bin;

/// The binaries a page may tell a user to run; their `--help` is the truth.
const BINARIES: &[&str] = &[
    "arbiter-coordinator",
    "arbiter-worker",
    "arbiter-console",
    "arbiter-web",
    "arbiter-admin",
    "arbiter-bench",
    "arbiter-conformance",
];

/// Scripts that run one of the binaries with the arguments they are given.
const SCRIPTS_PASSING_TO: &[(&str, &str)] = &[("scripts/console", "arbiter-console")];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// The pages checked, relative to the root: the README, every page of
/// `docs/`, and the READMEs beside the code.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![
        PathBuf::from("README.md"),
        PathBuf::from("deploy/README.md"),
        PathBuf::from("examples/python-worker/README.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| {
            path.strip_prefix(&root)
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(page: &Path) -> String {
    std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

/// A fenced block's lines with their line numbers (1-based) and its info
/// string, or a line outside any fence.
enum Line<'a> {
    Prose(usize, &'a str),
    Fenced {
        number: usize,
        text: &'a str,
        info: &'a str,
    },
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut fence: Option<(&str, &str)> = None; // (marker, info)
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let trimmed = line.trim_start();
        match fence {
            Some((marker, info)) => {
                if trimmed.starts_with(marker) && trimmed.trim_end() == marker {
                    fence = None;
                } else {
                    out.push(Line::Fenced {
                        number,
                        text: line,
                        info,
                    });
                }
            }
            None => {
                let marker = if trimmed.starts_with("```") {
                    Some("```")
                } else if trimmed.starts_with("~~~") {
                    Some("~~~")
                } else {
                    None
                };
                match marker {
                    Some(marker) => fence = Some((marker, trimmed[3..].trim())),
                    None => out.push(Line::Prose(number, line)),
                }
            }
        }
    }
    out
}

/// `text` with inline code spans blanked out, so that a link written as code
/// is not taken for a link.
fn without_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = "`".repeat(ticks);
        let after = &rest[start + ticks..];
        match after.find(&fence) {
            Some(end) => {
                out.push_str(&" ".repeat(ticks * 2 + end));
                rest = &after[end + ticks..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// GitHub's anchor of a heading: the rendered text lowercased, every
/// character that is not a letter, a digit, `-`, `_` or a space dropped, and
/// spaces turned into `-`.
fn slug(heading: &str) -> String {
    // Links render as their text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a page has: its headings' slugs (a repeated one gets `-1`,
/// `-2`…, as on GitHub) and its `<a id>`/`<a name>` tags.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in lines(text) {
        let Line::Prose(_, line) = line else { continue };
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(line[hashes..].trim().trim_end_matches('#'));
            let n = seen.entry(base.clone()).or_insert(0);
            anchors.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        for tag in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(tag) {
                rest = &rest[i + tag.len()..];
                if let Some(end) = rest.find('"') {
                    anchors.insert(rest[..end].to_string());
                }
            }
        }
    }
    anchors
}

/// The targets of the inline links and images of a line (`[text](target)`),
/// and of a reference definition (`[label]: target`).
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = rest[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &rest[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(i) = trimmed.find("]: ")
    {
        targets.push(trimmed[i + 3..].trim().to_string());
    }
    targets
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// The broken links of `page`, one line each.
fn broken_links(page: &Path) -> Vec<String> {
    let root = root();
    let text = read(page);
    let here = page.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for line in lines(&text) {
        let Line::Prose(number, line) = line else {
            continue;
        };
        for target in link_targets(line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                root.join(page)
            } else {
                root.join(here).join(path)
            };
            let at = format!("{}:{number}: link {target}", page.display());
            if !file.exists() {
                broken.push(format!("{at}: no such file {}", here.join(path).display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(&file).unwrap_or_default();
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!(
                    "{at}: no heading or <a id> gives #{anchor} in {}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
            }
        }
    }
    broken
}

#[test]
fn links_and_anchors_resolve() {
    let broken: Vec<String> = pages().iter().flat_map(|page| broken_links(page)).collect();
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// A shell word, or an operator that ends a simple command.
#[derive(Debug, PartialEq)]
enum Word {
    Text(String),
    End,
}

/// The words of one shell line, roughly as a shell splits them: quotes kept
/// together (and taken off), `;`, `|`, `&`, `(`, `)` and redirections end a
/// command, `#` at a word's start begins a comment, and a `<placeholder>` is
/// a word.
fn words(line: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let flush = |word: &mut String, in_word: &mut bool, out: &mut Vec<Word>| {
        if *in_word {
            out.push(Word::Text(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() => flush(&mut word, &mut in_word, &mut out),
            '#' if !in_word => break,
            ';' | '|' | '&' | '(' | ')' | '>' => {
                flush(&mut word, &mut in_word, &mut out);
                out.push(Word::End);
            }
            '<' => {
                let rest: String = chars.clone().collect();
                match rest.find('>') {
                    Some(end)
                        if !rest[..end].is_empty()
                            && rest[..end].chars().all(|c| {
                                c.is_alphanumeric() || matches!(c, '-' | '_' | ' ' | '.')
                            }) =>
                    {
                        in_word = true;
                        word.push('<');
                        for _ in 0..=end {
                            word.extend(chars.next());
                        }
                    }
                    _ => {
                        flush(&mut word, &mut in_word, &mut out);
                        out.push(Word::End);
                    }
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut in_word, &mut out);
    out
}

/// What `--help` says a command takes.
#[derive(Debug, Default)]
struct Help {
    /// Long flags without the dashes, and whether each takes a value.
    long: BTreeMap<String, bool>,
    /// Short flags, and whether each takes a value.
    short: BTreeMap<char, bool>,
    subcommands: BTreeSet<String>,
    /// It takes positional arguments (an `Arguments:` section).
    positional: bool,
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line;
            continue;
        }
        match section {
            "Commands:" => {
                // A command's line is indented by two; its description's
                // continuation lines by more.
                if let Some(name) = line.strip_prefix("  ")
                    && !name.starts_with(' ')
                    && let Some(name) = name.split_whitespace().next()
                {
                    help.subcommands.insert(name.to_string());
                }
            }
            "Arguments:" => help.positional = true,
            _ => {}
        }
        let flag = line.trim_start();
        if !flag.starts_with('-') || line.len() == flag.len() {
            continue;
        }
        // `-s, --long <VALUE>`, `--long <VALUE>`, `-s <VALUE>`, `--long`
        let mut short = None;
        let mut rest = flag;
        if let Some(after) = rest.strip_prefix('-')
            && !after.starts_with('-')
        {
            let c = after.chars().next().unwrap_or(' ');
            short = Some(c);
            rest = after[c.len_utf8()..].trim_start_matches(',').trim_start();
        }
        let value_follows = |rest: &str| rest.starts_with(" <") || rest.starts_with("=<");
        if let Some(long) = rest.strip_prefix("--") {
            let end = long
                .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(long.len());
            let takes = value_follows(&long[end..]) || long[end..].starts_with(" [<");
            help.long.insert(long[..end].to_string(), takes);
            if let Some(c) = short {
                help.short.insert(c, takes);
            }
        } else if let Some(c) = short {
            help.short.insert(c, value_follows(&format!(" {rest}")));
        }
    }
    help
}

/// `--help` of `binary` and its subcommands, each asked once.
#[derive(Default)]
struct Helps(BTreeMap<(String, Vec<String>), Help>);

impl Helps {
    fn of(&mut self, binary: &str, path: &[String]) -> &Help {
        self.0
            .entry((binary.to_string(), path.to_vec()))
            .or_insert_with(|| {
                let out = Command::new(bin(binary))
                    .args(path)
                    .arg("--help")
                    .env_remove("RUST_LOG")
                    .output()
                    .unwrap_or_else(|e| panic!("{binary} --help: {e}"));
                assert!(
                    out.status.success(),
                    "{binary} {} --help failed: {}",
                    path.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                parse_help(&String::from_utf8_lossy(&out.stdout))
            })
    }
}

/// Why `args`, given to `binary`, are not what its `--help` lists, if they
/// are not.
fn check_args(helps: &mut Helps, binary: &str, args: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut value_next = false;
    for &arg in args {
        if std::mem::take(&mut value_next) {
            continue;
        }
        let command = if path.is_empty() {
            binary.to_string()
        } else {
            format!("{binary} {}", path.join(" "))
        };
        let help = helps.of(binary, &path);
        if arg == "--" {
            break;
        } else if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            match help.long.get(name) {
                Some(&takes) => value_next = takes && !inline,
                None => {
                    problems.push(format!("`{command} --help` lists no --{name}"));
                    break;
                }
            }
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().unwrap_or('-');
            match help.short.get(&c) {
                Some(&takes) => value_next = takes && short.len() == c.len_utf8(),
                None => {
                    problems.push(format!("`{command} --help` lists no -{c}"));
                    break;
                }
            }
        } else if help.subcommands.contains(arg) {
            path.push(arg.to_string());
        } else if !help.subcommands.is_empty() && !help.positional {
            problems.push(format!(
                "`{command} --help` lists no subcommand {arg} (it has {})",
                help.subcommands
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            break;
        }
    }
    problems
}

/// The binary a command runs and the arguments it gets, if it runs one of
/// ours: `target/debug/arbiter-admin init …`, `arbiter-worker …`,
/// `scripts/console …`, `cargo run -p arbiter-bench [--] …`.
fn invocation(command: &[String]) -> Option<(&'static str, Vec<&str>)> {
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    // Leading variable assignments, `exec` and `env` run what follows.
    let assignment = |w: &str| w.contains('=') && !w.starts_with('-');
    let start = words
        .iter()
        .position(|w| !assignment(w) && !matches!(*w, "exec" | "env"))?;
    if words[start] == "cargo" {
        if words.get(start + 1) != Some(&"run") {
            return None;
        }
        let package = words
            .iter()
            .position(|w| matches!(*w, "-p" | "--package" | "--bin"))?;
        let name = BINARIES
            .iter()
            .find(|b| words.get(package + 1) == Some(b))?;
        // Before `--`, flags are cargo's and words the binary's.
        let mut args = Vec::new();
        let mut rest = words[package + 2..].iter();
        for &w in rest.by_ref() {
            if w == "--" {
                break;
            }
            if !w.starts_with('-') {
                args.push(w);
            }
        }
        args.extend(rest);
        return Some((name, args));
    }
    words.iter().enumerate().find_map(|(i, w)| {
        let base = w.rsplit('/').next().unwrap_or(w);
        let binary = BINARIES.iter().find(|b| **b == base).copied().or_else(|| {
            SCRIPTS_PASSING_TO
                .iter()
                .find(|(script, _)| w.ends_with(script))
                .map(|(_, binary)| *binary)
        })?;
        Some((binary, words[i + 1..].to_vec()))
    })
}

/// The lines of the page's `sh` (`bash`, `shell`, `console`) blocks with
/// their first line's number, `\` continuations joined.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for line in lines(text) {
        let Line::Fenced { number, text, info } = line else {
            open = false;
            continue;
        };
        let lang = info.split_whitespace().next().unwrap_or("");
        if !matches!(lang, "sh" | "bash" | "shell" | "console") {
            continue;
        }
        let (body, continues) = match text.trim_end().strip_suffix('\\') {
            Some(body) => (body, true),
            None => (text, false),
        };
        match out.last_mut() {
            Some((_, joined)) if open => {
                joined.push(' ');
                joined.push_str(body);
            }
            _ => out.push((number, body.to_string())),
        }
        open = continues;
    }
    out
}

/// Every `scripts/<name>` a text names (not `x/scripts/…`).
fn scripts_named(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find("scripts/").map(|i| from + i) {
        from = i + "scripts/".len();
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-')) {
            continue;
        }
        let name = &text[from..];
        let end = name
            .find(|c: char| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(name.len());
        let name = name[..end].trim_end_matches('.');
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// The commands of `page` that would not run as written, one line each.
fn wrong_commands(helps: &mut Helps, page: &Path) -> Vec<String> {
    let root = root();
    let text = read(page);
    let mut wrong = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for name in scripts_named(line) {
            if !root.join("scripts").join(name).is_file() {
                wrong.push(format!(
                    "{}:{}: scripts/{name} does not exist",
                    page.display(),
                    number + 1
                ));
            }
        }
    }
    for (number, line) in shell_lines(&text) {
        let words = words(&line);
        for command in words.split(|w| *w == Word::End) {
            let command: Vec<String> = command
                .iter()
                .filter_map(|w| match w {
                    Word::Text(t) => Some(t.clone()),
                    Word::End => None,
                })
                .collect();
            let Some((binary, args)) = invocation(&command) else {
                continue;
            };
            for problem in check_args(helps, binary, &args) {
                wrong.push(format!(
                    "{}:{number}: {problem}: {}",
                    page.display(),
                    line.trim()
                ));
            }
        }
    }
    wrong
}

#[test]
fn commands_use_only_what_help_lists() {
    let mut helps = Helps::default();
    let wrong: Vec<String> = pages()
        .iter()
        .flat_map(|page| wrong_commands(&mut helps, page))
        .collect();
    assert!(
        wrong.is_empty(),
        "commands that would not run as written:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checks_catch_what_they_are_for() {
    assert_eq!(
        slug("Structured output with tools: `structured_output` and `server`"),
        "structured-output-with-tools-structured_output-and-server"
    );
    assert_eq!(
        slug("`arbiter.v1.summon.<pool>`: start an Orchestrator"),
        "arbiterv1summonpool-start-an-orchestrator"
    );
    assert_eq!(slug("A [link](x.md) in it"), "a-link-in-it");
    let page = "# Top\n\n## Again\n\n## Again\n\n```\n# not a heading\n```\n<a id=\"here\"></a>\n";
    let found = anchors(page);
    for anchor in ["top", "again", "again-1", "here"] {
        assert!(found.contains(anchor), "{anchor} in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        link_targets("see [a](docs/a.md#b), `[no](x.md)` and ![i](p.png)"),
        ["docs/a.md#b", "p.png"]
    );

    let text = |w: &str| Word::Text(w.to_string());
    assert_eq!(
        words("(set -a; . x/env; exec target/debug/arbiter-console --plain)  # or --json"),
        [
            Word::End,
            text("set"),
            text("-a"),
            Word::End,
            text("."),
            text("x/env"),
            Word::End,
            text("exec"),
            text("target/debug/arbiter-console"),
            text("--plain"),
            Word::End,
        ]
    );
    assert_eq!(
        words("arbiter-console stop --session <id> > out"),
        [
            text("arbiter-console"),
            text("stop"),
            text("--session"),
            text("<id>"),
            Word::End,
            text("out"),
        ]
    );

    let mut helps = Helps::default();
    assert!(check_args(&mut helps, "arbiter-console", &["--session", "<id>"]).is_empty());
    assert!(check_args(&mut helps, "arbiter-console", &["sessions", "--json"]).is_empty());
    assert!(check_args(&mut helps, "arbiter-admin", &["init", "--san", "h"]).is_empty());
    assert_eq!(
        check_args(&mut helps, "arbiter-console", &["--sesion", "<id>"]),
        ["`arbiter-console --help` lists no --sesion"]
    );
    assert_eq!(
        check_args(&mut helps, "arbiter-console", &["sessions", "--plain"]),
        ["`arbiter-console sessions --help` lists no --plain"]
    );
    assert_eq!(
        check_args(&mut helps, "arbiter-admin", &["nuke"]).len(),
        1,
        "an unknown subcommand"
    );
    let command = |line: &str| -> Vec<String> {
        words(line)
            .into_iter()
            .filter_map(|w| match w {
                Word::Text(t) => Some(t),
                Word::End => None,
            })
            .collect()
    };
    let bench = command("cargo run --release -p arbiter-bench validate -- --phases x");
    assert_eq!(
        invocation(&bench),
        Some(("arbiter-bench", vec!["validate", "--phases", "x"]))
    );
    let console = command("A=b scripts/console --session s");
    assert_eq!(
        invocation(&console),
        Some(("arbiter-console", vec!["--session", "s"]))
    );
    assert_eq!(invocation(&command("cargo build -p arbiter-console")), None);
    assert_eq!(
        scripts_named("run scripts/up, then examples/x/scripts/no and `scripts/test`."),
        ["up", "test"]
    );
}
