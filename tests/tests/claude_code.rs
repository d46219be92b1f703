//! The claude-code runtime against the real Claude Code CLI (`CLAUDE_CLI_BIN`,
//! from the pinned `claude-agent-sdk` wheel) and the mock Messages API:
//! context warnings reach the CLI's model through the `PostToolUse` hook, a
//! write outside the workspace is denied, a turn the CLI fails ends in a
//! `failed` event with its cause and frees the slot, a worker without a
//! usable CLI refuses to start, and a summons for one runtime is left to a
//! worker that runs it.

pub mod confinement;
pub mod failures;
pub mod moves;
pub mod support;
pub mod work;
