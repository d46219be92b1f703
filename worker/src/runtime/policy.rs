//! An Orchestrator's policy (docs/approvals.md) on a CLI runtime: what maps
//! onto the CLI's own permissions, and what does not. Neither CLI can pause
//! a call for the human, so a policy that can ask is refused at the
//! Orchestrator's start, as is a rule the CLI cannot express: such an
//! Orchestrator fails with a reason naming the runtime and the rule, and
//! never runs looser than its policy says (docs/runtimes.md).
//!
//! - claude-code: `deny` rules become `--disallowedTools` rules (a `bash`
//!   pattern that is a command or a command prefix, `git push*` →
//!   `Bash(git push:*)`; a rule without a pattern → the tool), and mode
//!   `read-only` disallows `Write`, `Edit` and `Bash`. Path patterns are
//!   not mapped (the CLI spells and matches them differently).
//! - codex: mode `read-only` becomes its `read-only` sandbox; a `deny`
//!   rule is not expressible (but for `write` and `edit` under read-only,
//!   which the sandbox covers).

use arbiter_protocol::Layers;
use arbiter_protocol::approval::{Action, Mode, Policy, Rule, mutating};

use super::Runtime;

/// What the CLI is started with for an Orchestrator's layers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Mapped {
    /// claude-code: rules for `--disallowedTools`.
    pub disallowed: Vec<String>,
    /// codex: its sandbox is `read-only` rather than `workspace-write`.
    pub read_only: bool,
}

/// The layers as `runtime` runs them, or why it cannot.
pub(crate) fn map(runtime: Runtime, layers: &Layers) -> Result<Mapped, String> {
    if runtime == Runtime::Native {
        return Ok(Mapped::default());
    }
    let policies = || std::iter::once(&layers.floor).chain(&layers.tighter);
    if let Some(asks) = policies().find_map(asking) {
        return Err(format!(
            "the {runtime} runtime cannot ask for approval: `{asks}` needs the native runtime"
        ));
    }
    let mut mapped = Mapped::default();
    for policy in policies() {
        if policy.mode == Mode::ReadOnly
            && let Some(rule) = policy
                .rules
                .iter()
                .find(|r| r.action == Action::Allow && (r.tool == "*" || mutating(&r.tool)))
        {
            return Err(cannot(
                runtime,
                rule,
                "an allow under mode read-only (the CLI's read-only switch has no exceptions)",
            ));
        }
        match runtime {
            Runtime::ClaudeCode => claude(policy, &mut mapped.disallowed)?,
            Runtime::Codex => codex(policy, &mut mapped.read_only)?,
            Runtime::Native => {}
        }
    }
    let mut seen = std::collections::HashSet::new();
    mapped.disallowed.retain(|rule| seen.insert(rule.clone()));
    Ok(mapped)
}

/// What in `policy` can ask: its first `ask` rule, or its mode.
fn asking(policy: &Policy) -> Option<String> {
    if let Some(rule) = policy.rules.iter().find(|r| r.action == Action::Ask) {
        return Some(rule.to_string());
    }
    (policy.mode == Mode::Ask).then(|| "mode ask".to_owned())
}

fn cannot(runtime: Runtime, rule: &Rule, why: &str) -> String {
    format!("the {runtime} runtime cannot express `{rule}`: {why}; it needs the native runtime")
}

/// The Claude Code tool a policy's tool name is, if the runtime offers it.
fn claude_tool(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "read" => "Read",
        "write" => "Write",
        "edit" => "Edit",
        "glob" => "Glob",
        "grep" => "Grep",
        "bash" => "Bash",
        "task" => "Task",
        _ => return None,
    })
}

fn claude(policy: &Policy, disallowed: &mut Vec<String>) -> Result<(), String> {
    if policy.mode == Mode::ReadOnly {
        disallowed.extend(["Write", "Edit", "Bash"].map(str::to_owned));
    }
    for rule in policy.rules.iter().filter(|r| r.action == Action::Deny) {
        // An MCP tool keeps its name (`mcp__git__git_commit`), and a glob
        // over one server's tools is the server (`mcp__git__*` → `mcp__git`).
        if rule.tool.starts_with(crate::mcp::PREFIX) && rule.tool != "*" {
            let name = match rule.tool.strip_suffix("__*") {
                Some(server) if !server.contains(['*', '?', '[']) => server,
                _ if !rule.tool.contains(['*', '?', '[']) => rule.tool.as_str(),
                _ => {
                    return Err(cannot(
                        Runtime::ClaudeCode,
                        rule,
                        "the CLI names an MCP tool (mcp__server__tool) or a whole server \
                         (mcp__server__*), not other wildcards",
                    ));
                }
            };
            if rule.pattern.is_some() {
                return Err(cannot(
                    Runtime::ClaudeCode,
                    rule,
                    "an MCP tool's rule has no pattern",
                ));
            }
            disallowed.push(name.to_owned());
            continue;
        }
        let tools: Vec<&str> = if rule.tool == "*" {
            super::claude::TOOLS.to_vec()
        } else {
            // A tool the CLI is not given cannot be called there at all.
            claude_tool(&rule.tool).into_iter().collect()
        };
        let Some(pattern) = &rule.pattern else {
            disallowed.extend(tools.iter().map(|t| (*t).to_owned()));
            continue;
        };
        if rule.tool != "bash" {
            return Err(cannot(
                Runtime::ClaudeCode,
                rule,
                "the CLI's rules cannot say a path pattern as the policy means it",
            ));
        }
        match claude_bash(pattern) {
            Some(mapped) => disallowed.push(mapped),
            None => {
                return Err(cannot(
                    Runtime::ClaudeCode,
                    rule,
                    "the CLI's Bash rules match a command or a command's prefix (`git push*`), \
                     not a wildcard inside it",
                ));
            }
        }
    }
    Ok(())
}

/// A `bash` pattern as a Claude Code rule: a command (`Bash(git status)`),
/// a prefix (`git push*` → `Bash(git push:*)`), or every command (`*`).
fn claude_bash(pattern: &str) -> Option<String> {
    let wild = |c: char| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '(' | ')');
    let pattern = pattern.trim();
    if let Some(prefix) = pattern.strip_suffix('*') {
        let prefix = prefix.trim_end();
        if prefix.contains(wild) {
            return None;
        }
        return Some(if prefix.is_empty() {
            "Bash".to_owned()
        } else {
            format!("Bash({prefix}:*)")
        });
    }
    (!pattern.contains(wild)).then(|| format!("Bash({pattern})"))
}

fn codex(policy: &Policy, read_only: &mut bool) -> Result<(), String> {
    let ro = policy.mode == Mode::ReadOnly;
    *read_only |= ro;
    for rule in policy.rules.iter().filter(|r| r.action == Action::Deny) {
        let covered = ro && matches!(rule.tool.as_str(), "write" | "edit");
        if !covered {
            return Err(cannot(
                Runtime::Codex,
                rule,
                "of a policy, only mode read-only maps (to its read-only sandbox)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(floor: &str, session: Option<&str>) -> Layers {
        let tighter = session
            .map(|s| Policy::parse(s).unwrap())
            .into_iter()
            .collect();
        Layers::new(Policy::parse(floor).unwrap(), tighter).unwrap()
    }

    #[test]
    fn the_native_runtime_takes_any_policy() {
        let l = layers("mode ask; ask bash(git push*)", None);
        assert_eq!(map(Runtime::Native, &l), Ok(Mapped::default()));
    }

    #[test]
    fn a_policy_that_can_ask_is_refused_on_both_clis_naming_the_runtime_and_the_rule() {
        let l = layers("ask bash(git push*)", None);
        assert_eq!(
            map(Runtime::ClaudeCode, &l).unwrap_err(),
            "the claude-code runtime cannot ask for approval: `ask bash(git push*)` needs the \
             native runtime"
        );
        let l = layers("", Some("mode ask"));
        assert_eq!(
            map(Runtime::Codex, &l).unwrap_err(),
            "the codex runtime cannot ask for approval: `mode ask` needs the native runtime"
        );
    }

    #[test]
    fn claude_code_gets_deny_rules_and_read_only_as_disallowed_tools() {
        let l = layers(
            "deny bash(git push*); deny bash(rm -rf /); deny write; deny *",
            None,
        );
        let mapped = map(Runtime::ClaudeCode, &l).unwrap();
        assert_eq!(
            mapped.disallowed,
            [
                "Bash(git push:*)",
                "Bash(rm -rf /)",
                "Write",
                "Read",
                "Edit",
                "Glob",
                "Grep",
                "Bash",
                "Task"
            ]
        );
        let l = layers("deny bash(curl *)", Some("mode read-only"));
        let mapped = map(Runtime::ClaudeCode, &l).unwrap();
        assert_eq!(mapped.disallowed, ["Bash(curl:*)", "Write", "Edit", "Bash"]);
        assert!(!mapped.read_only);
        // MCP tools by name, and a whole server.
        let l = layers("deny mcp__git__git_commit; deny mcp__tracker__*", None);
        let mapped = map(Runtime::ClaudeCode, &l).unwrap();
        assert_eq!(mapped.disallowed, ["mcp__git__git_commit", "mcp__tracker"]);
        // Allow rules in mode auto change nothing there.
        let l = layers("allow bash(cargo test*)", None);
        assert_eq!(map(Runtime::ClaudeCode, &l), Ok(Mapped::default()));
    }

    #[test]
    fn what_claude_code_cannot_express_is_refused() {
        for (policy, rule) in [
            ("deny write(**/.env)", "deny write(**/.env)"),
            ("deny bash(git * --force)", "deny bash(git * --force)"),
            ("deny mcp__git__git_*", "deny mcp__git__git_*"),
            (
                "mode read-only; allow bash(cargo test*)",
                "allow bash(cargo test*)",
            ),
        ] {
            let error = map(Runtime::ClaudeCode, &layers(policy, None)).unwrap_err();
            assert!(
                error.starts_with(&format!("the claude-code runtime cannot express `{rule}`")),
                "{error}"
            );
            assert!(error.ends_with("it needs the native runtime"), "{error}");
        }
    }

    #[test]
    fn codex_gets_read_only_as_its_sandbox_and_refuses_deny_rules() {
        let mapped = map(Runtime::Codex, &layers("", Some("mode read-only"))).unwrap();
        assert!(mapped.read_only);
        assert!(mapped.disallowed.is_empty());
        let mapped = map(
            Runtime::Codex,
            &layers("mode read-only; deny write(**/.env)", None),
        );
        assert_eq!(mapped.map(|m| m.read_only), Ok(true));
        assert!(!map(Runtime::Codex, &layers("", None)).unwrap().read_only);
        let error = map(Runtime::Codex, &layers("deny bash(rm -rf *)", None)).unwrap_err();
        assert!(
            error.starts_with("the codex runtime cannot express `deny bash(rm -rf *)`"),
            "{error}"
        );
    }
}
