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

use std::fmt;
use std::str::FromStr;

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
