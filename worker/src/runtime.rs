//! The runtime seam: what runs an Orchestrator's turns. Everything on the
//! protocol side (claim, lease, fencing, inputs, outputs, status, release,
//! cancel, the stored records) is the same for every runtime; only "run
//! this turn" differs. `native` is the project's own agent loop
//! (`agent.rs`: model calls and tools in this process); `claude-code` runs
//! each Orchestrator in a long-lived Claude Code CLI process
//! (`runtime/claude.rs`, driven from `agent/cli.rs`); `codex` runs each
//! turn as one `codex exec` process on the Orchestrator's Codex thread
//! (`runtime/codex.rs`, driven from `agent/codex.rs`).

pub mod claude;
pub mod codex;
pub(crate) mod policy;

use std::fmt;
use std::path::Path;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

/// Which runtime runs this worker's Orchestrators (`--runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// The project's own agent loop.
    #[default]
    Native,
    /// The Claude Code CLI in headless stream-json mode, one process per Orchestrator.
    ClaudeCode,
    /// The OpenAI Codex CLI (`codex exec --json`), one process per turn.
    Codex,
}

impl Runtime {
    /// The name a summons asks for (`Summon::runtime`) and `--runtime` takes.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Native => "native",
            Runtime::ClaudeCode => "claude-code",
            Runtime::Codex => "codex",
        }
    }

    /// Whether this runtime runs a summons that asks for `wanted` (`None`: any).
    pub fn offers(self, wanted: Option<&str>) -> bool {
        wanted.is_none_or(|wanted| wanted == self.name())
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Runtime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "native" => Ok(Runtime::Native),
            "claude-code" => Ok(Runtime::ClaudeCode),
            "codex" => Ok(Runtime::Codex),
            other => Err(format!(
                "unknown runtime {other:?}: use native, claude-code or codex"
            )),
        }
    }
}

/// An agent CLI as its runtime's start-up check names it.
pub(crate) struct Cli<'a> {
    /// The runtime that needs it (`claude-code`).
    pub runtime: &'a str,
    /// Its name in sentences (`Claude Code CLI`).
    pub name: &'a str,
    /// What to install, said with every refusal.
    pub hint: &'a str,
    /// The oldest version the runtime was built and tested against.
    pub min: (u32, u32, u32),
    /// The version in its `--version` output, when the output is this CLI's.
    pub version_of: fn(&str) -> Option<String>,
}

/// Checks that `bin` runs (with `env` only) and is recent enough: its
/// version, or one line that says what to install.
pub(crate) async fn probe_cli(
    bin: &Path,
    env: Vec<(String, std::ffi::OsString)>,
    cli: &Cli<'_>,
) -> Result<String, String> {
    let Cli {
        runtime,
        name,
        hint,
        ..
    } = cli;
    let out = tokio::process::Command::new(bin)
        .arg("--version")
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(Duration::from_secs(30), out).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "the {runtime} runtime needs the {name}, and {} was not found: {hint}",
                bin.display()
            ));
        }
        Ok(Err(e)) => {
            return Err(format!(
                "the {name} {} does not start ({e}): {hint}",
                bin.display()
            ));
        }
        Err(_) => {
            return Err(format!(
                "the {name} {} did not answer --version within 30 s: {hint}",
                bin.display()
            ));
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = (cli.version_of)(&text).filter(|_| out.status.success()) else {
        return Err(format!(
            "{} is not a working {name} (`--version` {}: {:?}): {hint}",
            bin.display(),
            out.status,
            text.trim()
        ));
    };
    match parse_version(&version) {
        Some(v) if v >= cli.min => Ok(version),
        _ => {
            let (a, b, c) = cli.min;
            Err(format!(
                "the {name} {} is version {version}, older than {a}.{b}.{c}: {hint}",
                bin.display()
            ))
        }
    }
}

/// `2.1.331` as numbers.
pub(crate) fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_offers_what_it_is_and_what_asks_for_none() {
        assert!(Runtime::Native.offers(None));
        assert!(Runtime::Native.offers(Some("native")));
        assert!(!Runtime::Native.offers(Some("claude-code")));
        assert!(Runtime::ClaudeCode.offers(Some("claude-code")));
        assert!(!Runtime::ClaudeCode.offers(Some("codex")));
        assert_eq!("claude-code".parse(), Ok(Runtime::ClaudeCode));
        assert_eq!("codex".parse(), Ok(Runtime::Codex));
        assert!(Runtime::Codex.offers(Some("codex")));
        assert!(!Runtime::Codex.offers(Some("claude-code")));
        assert!(
            "gemini"
                .parse::<Runtime>()
                .unwrap_err()
                .contains("native, claude-code or codex")
        );
    }
}
