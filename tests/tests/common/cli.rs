//! The agent CLIs the tests run: Claude Code and Codex.

use std::path::PathBuf;

/// The Claude Code CLI the tests run (`CLAUDE_CLI_BIN`, which
/// `scripts/test` sets from `scripts/install-claude-cli`), with the
/// worker binary as its hook.
pub fn claude_code() -> arbiter_worker::ClaudeCodeConfig {
    arbiter_worker::ClaudeCodeConfig {
        bin: std::env::var_os("CLAUDE_CLI_BIN")
            .map_or_else(|| PathBuf::from("claude"), PathBuf::from),
        hook_bin: Some(arbiter_tests::bin("arbiter-worker")),
        allow: Vec::new(),
    }
}

/// The Codex CLI the tests run (`CODEX_CLI_BIN`, which `scripts/test`
/// sets from `scripts/install-codex-cli`).
pub fn codex() -> arbiter_worker::CodexConfig {
    arbiter_worker::CodexConfig {
        bin: std::env::var_os("CODEX_CLI_BIN")
            .map_or_else(|| PathBuf::from("codex"), PathBuf::from),
    }
}

/// The path of the Codex CLI for tests that need it; panics with what to
/// run when it is not set.
pub fn codex_cli_bin() -> PathBuf {
    match std::env::var_os("CODEX_CLI_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => panic!(
            "CODEX_CLI_BIN is not set: run `export CODEX_CLI_BIN=$(scripts/install-codex-cli)` \
             (scripts/test does this)"
        ),
    }
}

/// The path of the Claude Code CLI for tests that need it; panics with
/// what to run when it is not set.
pub fn claude_cli_bin() -> PathBuf {
    match std::env::var_os("CLAUDE_CLI_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => panic!(
            "CLAUDE_CLI_BIN is not set: run `export CLAUDE_CLI_BIN=$(scripts/install-claude-cli)` \
             (scripts/test does this)"
        ),
    }
}
