//! A workspace's memory: facts and decisions worth keeping from one session
//! to the next. Each entry is one value of the KV bucket
//! [`crate::subjects::MEMORY_BUCKET`] under `<workspace>.<id>`; the
//! coordinator writes them (from the Arbiter's `memory` field and from the
//! decisions of Orchestrator handoff packets) and puts the newest that fit a
//! token budget into the first prompt of every new session on the workspace.
//! What looks like a secret is never stored: [`check_text`] says why.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest workspace name, in bytes.
pub const MAX_WORKSPACE: usize = 64;
/// Longest entry, in characters: a fact or a decision, not a document.
pub const MAX_ENTRY_CHARS: usize = 1000;
/// Tokens of memory put in a new session's first prompt unless the
/// coordinator is told otherwise (`--memory-tokens`).
pub const DEFAULT_MEMORY_TOKENS: u64 = 2000;

/// One thing a workspace remembers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryEntry {
    #[serde(default = "crate::version")]
    pub v: u32,
    /// The workspace (project) it belongs to.
    pub workspace: String,
    /// `m` and 12 hex digits, from the workspace and the words: the same
    /// fact recorded twice is one entry.
    pub id: String,
    pub kind: MemoryKind,
    /// The fact, or the decision and why.
    pub text: String,
    /// The session it was recorded in.
    pub session_id: String,
    /// Who recorded it: `Arbiter`, or the Orchestrator whose packet held it
    /// (`Orchestrator II`).
    pub by: String,
    pub at: DateTime<Utc>,
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Something the Arbiter chose to remember (its output's `memory` field).
    Fact,
    /// A decision of an Orchestrator's handoff packet, with its reason.
    Decision,
}

impl MemoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fact => "fact",
            Self::Decision => "decision",
        }
    }
}

impl MemoryEntry {
    /// What the entry costs in a prompt, in tokens: a character count over
    /// four, the usual estimate for English text and code.
    pub fn tokens(&self) -> u64 {
        line_tokens(&self.line())
    }

    /// The line a new session's Arbiter reads.
    pub fn line(&self) -> String {
        format!(
            "- [{}] ({}, {}) {}",
            self.id,
            self.kind.as_str(),
            self.at.format("%Y-%m-%d"),
            one_line(&self.text)
        )
    }
}

fn line_tokens(line: &str) -> u64 {
    (line.chars().count() as u64).div_ceil(4) + 1
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The memory block of a new session's first prompt: the newest entries
/// first, each taken if it still fits `budget` tokens (the header counted);
/// `None` when there is nothing to say or no room for it.
pub fn prompt_block(workspace: &str, entries: &[MemoryEntry], budget: u64) -> Option<String> {
    let mut sorted: Vec<&MemoryEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.id.cmp(&b.id)));
    let header = format!(
        "[Memory of workspace {workspace}: facts and decisions kept from earlier sessions, \
         newest first. The human can list and remove them (arbiter-console memory). \
         Record a new one with the `memory` field of your reply.]"
    );
    let mut used = line_tokens(&header);
    let mut lines = vec![header];
    let mut left_out = 0;
    for entry in sorted {
        let line = entry.line();
        let cost = line_tokens(&line);
        if used + cost <= budget {
            used += cost;
            lines.push(line);
        } else {
            left_out += 1;
        }
    }
    if lines.len() == 1 {
        return None;
    }
    if left_out > 0 {
        lines.push(format!(
            "- ({left_out} more left out: over the memory budget of {budget} tokens)"
        ));
    }
    Some(lines.join("\n"))
}

/// Whether `name` can name a workspace: letters, digits, `-` or `_`, at
/// most [`MAX_WORKSPACE`] bytes (it is a token of the bucket's keys).
pub fn is_valid_workspace(name: &str) -> bool {
    name.len() <= MAX_WORKSPACE && crate::subjects::is_valid_token(name)
}

/// Whether `text` may be kept: not blank, not too long, and holding
/// nothing that looks like a key, a token or a credential. The error says
/// why, for the Arbiter (as a system line) and the human.
pub fn check_text(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("an empty memory entry is not kept".to_owned());
    }
    let chars = text.chars().count();
    if chars > MAX_ENTRY_CHARS {
        return Err(format!(
            "a memory entry is one fact of at most {MAX_ENTRY_CHARS} characters (this one has {chars})"
        ));
    }
    match secret_in(text) {
        Some(what) => Err(format!(
            "it looks like it holds a secret ({what}); memory never keeps keys, tokens or \
             credentials: say where the secret lives instead (e.g. \"the API key is in \
             the ANTHROPIC_API_KEY variable\")"
        )),
        None => Ok(()),
    }
}

/// Patterns of well-known secrets, each with what it is.
static PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (
            r"sk-ant-[A-Za-z0-9_\-]{8,}",
            "an Anthropic API key (sk-ant-…)",
        ),
        (r"\bsk-[A-Za-z0-9_\-]{16,}", "an API key (sk-…)"),
        (
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}",
            "a GitHub token (ghp_…)",
        ),
        (r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "a Slack token (xox…)"),
        (
            r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
            "an AWS access key id (AKIA…)",
        ),
        (r"\bAIza[A-Za-z0-9_\-]{35}", "a Google API key (AIza…)"),
        (
            r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
            "a JWT",
        ),
        (
            r"\bS[UAOCNX][A-Z2-7]{56}\b",
            "a NATS nkey seed (SU…, SA…, SO…)",
        ),
        (
            r"-----BEGIN [A-Z ]*(?:PRIVATE KEY|JWT|SEED)[A-Z ]*-----",
            "a private key or NATS credentials",
        ),
        (
            r"\b[a-z][a-z0-9+.\-]*://[^\s/:@]+:[^\s/@]+@",
            "a password in a URL",
        ),
    ]
    .into_iter()
    .filter_map(|(pattern, what)| Regex::new(pattern).ok().map(|re| (re, what)))
    .collect()
});

/// `NAME=value` or `NAME: value` where the name says it is secret.
static ASSIGNMENT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b([A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Z0-9_]*)\s*[=:]\s*["']?([^\s"']{8,})"#,
    )
    .ok()
});

/// A word of this many characters or more is checked for randomness.
const LONG_TOKEN: usize = 32;
/// Bits of entropy per character above which a long word is taken for a
/// token: more than hex (4), well below random base64 (about 5.5).
const TOKEN_ENTROPY: f64 = 4.2;

/// What secret-like string `text` holds, if any: well-known key and token
/// shapes, a secret-named assignment with a literal value, or a long
/// random-looking word.
pub fn secret_in(text: &str) -> Option<&'static str> {
    for (re, what) in PATTERNS.iter() {
        if re.is_match(text) {
            return Some(what);
        }
    }
    if let Some(re) = ASSIGNMENT.as_ref() {
        for caps in re.captures_iter(text) {
            let value = caps.get(2).map_or("", |m| m.as_str());
            // A reference to a variable or a placeholder is not the secret.
            if !value.starts_with('$') && !value.starts_with('<') && !value.contains("...") {
                return Some("a secret-named setting with its value");
            }
        }
    }
    let words = text.split(|c: char| {
        c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | '(' | ')' | '[' | ']')
    });
    for word in words {
        let word = word.trim_matches(|c: char| matches!(c, '.' | ':'));
        if word.chars().count() >= LONG_TOKEN && looks_random(word) {
            return Some("a long random-looking token");
        }
    }
    None
}

/// A word made of token characters, mixing upper case, lower case and
/// digits, with high entropy: a path or a commit hash is not.
fn looks_random(word: &str) -> bool {
    if !word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-'))
    {
        return false;
    }
    let upper = word.chars().any(|c| c.is_ascii_uppercase());
    let lower = word.chars().any(|c| c.is_ascii_lowercase());
    let digit = word.chars().any(|c| c.is_ascii_digit());
    upper && lower && digit && entropy(word) > TOKEN_ENTROPY
}

/// Shannon entropy of the characters of `word`, in bits per character.
fn entropy(word: &str) -> f64 {
    let mut counts = std::collections::BTreeMap::new();
    for c in word.chars() {
        *counts.entry(c).or_insert(0u32) += 1;
    }
    let n = word.chars().count() as f64;
    counts
        .values()
        .map(|&k| {
            let p = f64::from(k) / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised() {
        let secrets = [
            ("use sk-ant-api03-AbCdEfGh0123456789", "Anthropic"),
            ("key sk-proj-0123456789abcdefABCD", "sk-"),
            ("token ghp_0123456789abcdefghijABCDEFGHIJ", "GitHub"),
            ("xoxb-1234567890-abcdefghij", "Slack"),
            ("AKIAIOSFODNN7EXAMPLE is the id", "AWS"),
            (
                "auth eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "JWT",
            ),
            (
                "seed SUAM3QGDQ4ZDCQGHL2NNQ5TH5NJFGMA5BYNDFJPQIFOQWNYYTKGB3YOUHE",
                "NATS",
            ),
            ("-----BEGIN NATS USER JWT-----", "credentials"),
            ("db at postgres://admin:hunter2hunter@db:5432", "URL"),
            ("set API_KEY=abcd1234efgh5678", "secret-named"),
            ("password: correct-horse-battery", "secret-named"),
            ("tok Zx9kQ2mP7vL4wR8tY3nB6cF1hJ5sD0gA", "random"),
        ];
        for (text, what) in secrets {
            let found = secret_in(text);
            assert!(
                found.is_some_and(|f| f.contains(what) || what == "random" && f.contains("random")),
                "{text:?}: {found:?}"
            );
            assert!(check_text(text).unwrap_err().contains("secret"), "{text}");
        }
    }

    #[test]
    fn plain_facts_pass() {
        let facts = [
            "The project builds with cargo; tests need nats-server on PATH.",
            "The API key lives in the ANTHROPIC_API_KEY variable, never in the repo.",
            "API_KEY=$ANTHROPIC_API_KEY is how the script passes it.",
            "Release 1.2 was cut at commit 0123456789abcdef0123456789abcdef01234567.",
            "Session 0191d3c4-5b6a-7c8d-9e0f-a1b2c3d4e5f6 chose TOML.",
            "Keep files under coordinator/src/memory_recall_budgeting_things.rs short.",
            "The human prefers British spelling and short commit messages.",
        ];
        for text in facts {
            assert_eq!(secret_in(text), None, "{text}");
            assert_eq!(check_text(text), Ok(()));
        }
        assert!(check_text("  ").unwrap_err().contains("empty"));
        assert!(check_text(&"x".repeat(1001)).unwrap_err().contains("1000"));
    }

    fn entry(id: &str, text: &str, day: u32) -> MemoryEntry {
        MemoryEntry {
            v: 1,
            workspace: "w".into(),
            id: id.into(),
            kind: MemoryKind::Fact,
            text: text.into(),
            session_id: "s".into(),
            by: "Arbiter".into(),
            at: chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 11, day, 0, 0, 0).unwrap(),
        }
    }

    #[test]
    fn the_block_takes_the_newest_that_fit() {
        let entries = [
            entry("m1", "oldest", 1),
            entry("m3", &"long ".repeat(100), 3),
            entry("m2", "middle", 2),
        ];
        let all = prompt_block("w", &entries, 10_000).unwrap();
        let order: Vec<usize> = ["m3", "m2", "m1"]
            .iter()
            .map(|id| all.find(id).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{all}");
        // Room for the header and the two short ones: the long one is left out.
        let small = prompt_block("w", &entries, 80).unwrap();
        assert!(small.contains("[m2]") && small.contains("[m1]"), "{small}");
        assert!(!small.contains("[m3]"));
        assert!(small.contains("1 more left out"), "{small}");
        assert_eq!(prompt_block("w", &entries, 5), None);
        assert_eq!(prompt_block("w", &[], 10_000), None);
    }
}
