//! Tool-call approvals (see docs/approvals.md): the policy every tool call
//! of an Orchestrator is checked against, the request a worker makes when
//! a call needs the human's word, and the human's answer.
//!
//! A policy is a list of rules and a mode. A rule names an action
//! (`allow`, `ask`, `deny`), a tool, and optionally a pattern: a glob over
//! the command for `bash` (each part of a compound command is checked on
//! its own), over the workspace-relative path for the file tools. The mode
//! says what happens to a call no rule matches: `auto` runs it, `ask` asks
//! for every mutating call, `read-only` denies every mutating call.
//!
//! Policies come in layers: the worker's (the floor), the session's (set by
//! the human), a summons' (the Arbiter's). A call is decided by each layer
//! and the strictest decision wins, so a layer can only tighten. A layer
//! that says it would loosen (a looser mode, or an `allow` where the floor
//! asks or denies) is refused as a whole rather than silently overridden:
//! see [`Policy::within`].

use std::fmt;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a rule, a mode or a policy does with a call; ordered from the
/// most permissive to the strictest.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// What a policy does with the calls no rule matches; ordered from the
/// most permissive to the strictest.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every call runs (the default).
    #[default]
    Auto,
    /// Every mutating call asks.
    Ask,
    /// Every mutating call is denied.
    ReadOnly,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Ask => "ask",
            Mode::ReadOnly => "read-only",
        }
    }

    /// What the mode does with a call of `tool`.
    pub fn action(self, tool: &str) -> Action {
        match self {
            _ if !mutating(tool) => Action::Allow,
            Mode::Auto => Action::Allow,
            Mode::Ask => Action::Ask,
            Mode::ReadOnly => Action::Deny,
        }
    }
}

/// Whether a call of `tool` can change anything: every tool but the ones
/// that only read (a subagent's own calls are checked one by one). A tool
/// this list does not know (an MCP server's) counts as mutating.
pub fn mutating(tool: &str) -> bool {
    !matches!(tool, "read" | "glob" | "grep" | "task")
}

/// One rule: `ask bash(git push*)`, `deny write(**/.env)`, `allow bash`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Rule {
    pub action: Action,
    /// The tool it applies to (`bash`, `write`, `edit`, `read`, an MCP
    /// server's `mcp__git__git_commit`…), `*` for every tool, or a glob
    /// over tool names (`mcp__github__*`: every tool of one MCP server).
    pub tool: String,
    /// A glob over the command (`bash`) or the workspace-relative path (the
    /// file tools); absent: every call of the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

impl Rule {
    /// The rule that allows exactly this call again (the human's "allow for
    /// this session"): its command or path, escaped, as the pattern. A
    /// backslash is doubled: patterns read `\` as an escape
    /// (`backslash_escape`), which `globset::escape` leaves alone.
    pub fn exactly(tool: &str, input: &serde_json::Value) -> Rule {
        Rule {
            action: Action::Allow,
            tool: tool.to_owned(),
            pattern: subject(tool, input).map(|s| globset::escape(&s.replace('\\', "\\\\"))),
        }
    }

    /// Whether the rule speaks of a call of `tool` with `input`.
    pub fn covers(&self, tool: &str, input: &serde_json::Value) -> bool {
        self.matches(tool, subject(tool, input).as_deref())
    }

    /// Whether the rule speaks of a call of `tool` on `subject` (its
    /// command or path, when it has one).
    fn matches(&self, tool: &str, subject: Option<&str>) -> bool {
        if !names(&self.tool, tool) {
            return false;
        }
        let Some(pattern) = &self.pattern else {
            return true;
        };
        let Some(subject) = subject else {
            return false;
        };
        // Paths: `*` stays within a directory and `**` crosses them; a
        // command: `*` matches anything, spaces and slashes included.
        let path = tool != "bash";
        let Ok(glob) = globset::GlobBuilder::new(pattern)
            .literal_separator(path)
            .backslash_escape(true)
            .build()
        else {
            return false;
        };
        let matcher = glob.compile_matcher();
        if tool == "bash" {
            matcher.is_match(subject.trim()) || parts(subject).iter().any(|p| matcher.is_match(p))
        } else {
            matcher.is_match(subject)
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.action.as_str(), self.tool)?;
        if let Some(pattern) = &self.pattern {
            write!(f, "({pattern})")?;
        }
        Ok(())
    }
}

/// A layer of policy: rules, and what happens to the calls none matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Policy {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
}

/// How one layer, or the layers together, decided a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    /// What decided it, as the human reads it: `ask bash(git push*)`, or
    /// `mode ask`.
    pub by: String,
}

impl Policy {
    /// The policy of `text`: rules and at most one `mode …`, separated by
    /// new lines or `;` (outside a pattern's parentheses); `#` starts a
    /// comment line. `mode read-only; ask bash(git push*); deny write(**/.env)`.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let mut policy = Policy::default();
        let mut mode_seen = false;
        for item in items(text) {
            let item = item.trim();
            if item.is_empty() || item.starts_with('#') {
                continue;
            }
            let (word, rest) = item.split_once(char::is_whitespace).unwrap_or((item, ""));
            let rest = rest.trim();
            let action = match word {
                "mode" => {
                    if mode_seen {
                        return Err(PolicyError::new(item, "a second mode"));
                    }
                    mode_seen = true;
                    policy.mode = match rest {
                        "auto" => Mode::Auto,
                        "ask" => Mode::Ask,
                        "read-only" => Mode::ReadOnly,
                        _ => return Err(PolicyError::new(item, "modes are auto, ask, read-only")),
                    };
                    continue;
                }
                "allow" => Action::Allow,
                "ask" => Action::Ask,
                "deny" => Action::Deny,
                _ => {
                    return Err(PolicyError::new(
                        item,
                        "a rule starts with allow, ask or deny; a mode with `mode`",
                    ));
                }
            };
            let (tool, pattern) = match rest.split_once('(') {
                Some((tool, pattern)) => {
                    let Some(pattern) = pattern.strip_suffix(')') else {
                        return Err(PolicyError::new(item, "the pattern's `)` is missing"));
                    };
                    if pattern.trim().is_empty() {
                        return Err(PolicyError::new(item, "an empty pattern"));
                    }
                    (tool.trim(), Some(pattern.trim().to_owned()))
                }
                None => (rest, None),
            };
            if tool.is_empty() || tool.contains(char::is_whitespace) {
                return Err(PolicyError::new(
                    item,
                    "name one tool: `ask bash(git push*)`, `deny write(**/.env)`",
                ));
            }
            if tool.contains(['*', '?', '[']) {
                globset::GlobBuilder::new(tool).build().map_err(|e| {
                    PolicyError::new(item, &format!("the tool's name: {}", e.kind()))
                })?;
            }
            if let Some(pattern) = &pattern {
                globset::GlobBuilder::new(pattern)
                    .backslash_escape(true)
                    .build()
                    .map_err(|e| PolicyError::new(item, &format!("the pattern: {}", e.kind())))?;
            }
            policy.rules.push(Rule {
                action,
                tool: tool.to_lowercase(),
                pattern,
            });
        }
        Ok(policy)
    }

    /// This layer's decision on a call of `tool` with `input`: the
    /// strictest rule that matches (a `deny` before an `ask` before an
    /// `allow`), else the mode's.
    pub fn decide(&self, tool: &str, input: &serde_json::Value) -> Decision {
        self.decide_subject(tool, subject(tool, input).as_deref())
    }

    fn decide_subject(&self, tool: &str, subject: Option<&str>) -> Decision {
        let matched = self
            .rules
            .iter()
            .filter(|r| r.matches(tool, subject))
            .max_by_key(|r| r.action);
        match matched {
            Some(rule) => Decision {
                action: rule.action,
                by: rule.to_string(),
            },
            None => Decision {
                action: self.mode.action(tool),
                by: format!("mode {}", self.mode.as_str()),
            },
        }
    }

    /// Refuses a layer that would loosen `floor`: a looser mode, or an
    /// `allow` rule the floor would ask about or deny (one with no pattern:
    /// any rule of the floor for that tool that asks or denies; one with a
    /// pattern: checked on a sample of it, each wildcard standing for one
    /// name). Such a layer
    /// is refused whole: the Arbiter or the human expects a call to run
    /// that would not.
    pub fn within(&self, floor: &Policy) -> Result<(), Loosening> {
        if self.mode < floor.mode {
            return Err(Loosening {
                asked: format!("mode {}", self.mode.as_str()),
                floor: format!("mode {}", floor.mode.as_str()),
            });
        }
        for rule in self.rules.iter().filter(|r| r.action == Action::Allow) {
            // An allow of every call of a tool reaches whatever the floor
            // asks about or denies of it.
            if rule.pattern.is_none()
                && let Some(stricter) = floor.rules.iter().find(|f| {
                    f.action > Action::Allow
                        && (names(&f.tool, &sample(&rule.tool))
                            || names(&rule.tool, &sample(&f.tool)))
                })
            {
                return Err(Loosening {
                    asked: rule.to_string(),
                    floor: stricter.to_string(),
                });
            }
            let tool = if rule.tool == "*" {
                "bash".to_owned()
            } else {
                sample(&rule.tool)
            };
            let sample = rule.pattern.as_deref().map(sample);
            let theirs = floor.decide_subject(&tool, sample.as_deref());
            if theirs.action > Action::Allow {
                return Err(Loosening {
                    asked: rule.to_string(),
                    floor: theirs.by,
                });
            }
        }
        Ok(())
    }

    /// Whether the policy can ask (an `ask` rule, or mode `ask`): what a
    /// runtime that cannot pause a call for the human cannot run.
    pub fn can_ask(&self) -> bool {
        self.mode == Mode::Ask || self.rules.iter().any(|r| r.action == Action::Ask)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mode {}", self.mode.as_str())?;
        for rule in &self.rules {
            write!(f, "; {rule}")?;
        }
        Ok(())
    }
}

/// A policy that did not parse: the item, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub item: String,
    pub reason: String,
}

impl PolicyError {
    fn new(item: &str, reason: &str) -> Self {
        Self {
            item: item.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy `{}`: {}", self.item, self.reason)
    }
}

impl std::error::Error for PolicyError {}

/// A layer refused by [`Policy::within`]: what it asked, and what the floor
/// says instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loosening {
    pub asked: String,
    pub floor: String,
}

impl fmt::Display for Loosening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` asks for more than the worker allows (`{}`): a policy may only tighten the worker's",
            self.asked, self.floor
        )
    }
}

impl std::error::Error for Loosening {}

/// Every layer an Orchestrator's calls are checked against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Layers {
    /// The worker's own policy: the floor.
    pub floor: Policy,
    /// The session's and the summons' (each within the floor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tighter: Vec<Policy>,
    /// Calls the human allowed for the rest of the session ("always"):
    /// they turn an `ask` into an `allow`, never a `deny`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<Rule>,
}

impl Layers {
    /// The floor with `tighter` on it, each refused when it would loosen it.
    pub fn new(floor: Policy, tighter: Vec<Policy>) -> Result<Layers, Loosening> {
        for layer in &tighter {
            layer.within(&floor)?;
        }
        Ok(Layers {
            floor,
            tighter,
            allowed: Vec::new(),
        })
    }

    /// The decision on a call: the strictest of the layers'; an `ask` the
    /// human allowed for the session runs.
    pub fn decide(&self, tool: &str, input: &serde_json::Value) -> Decision {
        let subject = subject(tool, input);
        let mut decision = self.floor.decide_subject(tool, subject.as_deref());
        for layer in &self.tighter {
            let theirs = layer.decide_subject(tool, subject.as_deref());
            if theirs.action > decision.action {
                decision = theirs;
            }
        }
        if decision.action == Action::Ask
            && let Some(rule) = self
                .allowed
                .iter()
                .find(|r| r.matches(tool, subject.as_deref()))
        {
            return Decision {
                action: Action::Allow,
                by: format!("{rule} (the human, for this session)"),
            };
        }
        decision
    }

    /// Whether any layer can ask.
    pub fn can_ask(&self) -> bool {
        self.floor.can_ask() || self.tighter.iter().any(Policy::can_ask)
    }
}

/// What a rule's pattern is matched against: the command of `bash`, the
/// path of the file tools (without a leading `./`), nothing for others.
pub fn subject(tool: &str, input: &serde_json::Value) -> Option<String> {
    let key = match tool {
        "bash" => "command",
        "read" | "write" | "edit" => "path",
        "glob" | "grep" => "path",
        _ => return None,
    };
    let value = input.get(key)?.as_str()?;
    Some(if tool == "bash" {
        value.trim().to_owned()
    } else {
        value.trim_start_matches("./").to_owned()
    })
}

/// The simple commands of a compound one (split on `&&`, `||`, `;`, `|`,
/// `&`, new lines, and the brackets of a subshell), each without its
/// leading variable assignments: `cd x && FOO=1 git push` has `cd x` and
/// `git push`. Quotes are not read, so a quoted operator splits too: that
/// can only make more parts, each checked, never hide one.
fn parts(command: &str) -> Vec<String> {
    command
        .split(['&', '|', ';', '\n', '(', ')', '`', '{', '}'])
        .map(|part| {
            let mut words = part.split_whitespace().peekable();
            while words.peek().is_some_and(|w| is_assignment(w)) {
                words.next();
            }
            let words: Vec<&str> = words.collect();
            words.join(" ")
        })
        .map(|p| p.trim_start_matches('$').trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// One name for each wildcard of `pattern`: what [`Policy::within`] checks
/// an `allow` rule's reach with.
/// Whether a rule's tool (a name, `*`, or a glob over names such as
/// `mcp__github__*`) names `tool`; names compare without case.
fn names(rule_tool: &str, tool: &str) -> bool {
    if rule_tool == "*" {
        return true;
    }
    if !rule_tool.contains(['*', '?', '[']) {
        return rule_tool.eq_ignore_ascii_case(tool);
    }
    globset::GlobBuilder::new(rule_tool)
        .case_insensitive(true)
        .build()
        .is_ok_and(|glob| glob.compile_matcher().is_match(tool))
}

fn sample(pattern: &str) -> String {
    pattern.replace("**", "x").replace(['*', '?'], "x")
}

/// The items of a policy's text: split on new lines and on `;` outside
/// parentheses.
fn items(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ';' if depth <= 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            '\n' => {
                out.push(&text[start..i]);
                start = i + 1;
                depth = 0;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// `orch.<id>.out` event: a call waits for the human's word. The worker
/// stores it in the Orchestrator's step before anything else happens; the
/// coordinator logs it and answers it with an input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRequest {
    /// The tool call's id (the model's `tool_use` id): the same on every
    /// worker that holds the Orchestrator.
    pub call_id: String,
    pub tool: String,
    /// The call's arguments, as the model wrote them: show them inert.
    pub input: serde_json::Value,
    /// What asked: `ask bash(git push*)`, `mode ask`.
    pub rule: String,
}

/// What the human (or the wait running out) said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    AllowOnce,
    /// Run it, and the same call again in this session without asking.
    AllowSession,
    Deny,
}

impl ApprovalDecision {
    pub fn allows(self) -> bool {
        self != ApprovalDecision::Deny
    }
}

/// Who answered an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answerer {
    /// A console, by its credential's name.
    Console { name: String },
    /// Nobody, within the wait: denied.
    Timeout,
    /// An earlier "allow for this session" of the same call.
    Session { rule: String },
}

impl fmt::Display for Answerer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answerer::Console { name } => write!(f, "console {name}"),
            Answerer::Timeout => f.write_str("no answer in time"),
            Answerer::Session { rule } => write!(f, "the session's `{rule}`"),
        }
    }
}

/// Log entry: an Orchestrator's call waits for approval `approval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalAskedEntry {
    /// 1, 2, 3… within the session: what `/allow <n>` names.
    pub approval: u32,
    pub number: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub orch_id: String,
    #[serde(flatten)]
    pub request: ApprovalRequest,
    /// When it is denied unanswered.
    pub deadline: DateTime<Utc>,
}

/// Log entry: approval `approval` was answered. Stored as the Orchestrator's
/// input `input_seq` (on `session.<id>.in.<orch_id>.<n>`), which is how its
/// worker hears it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalAnsweredEntry {
    pub approval: u32,
    pub number: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub orch_id: String,
    pub call_id: String,
    pub decision: ApprovalDecision,
    /// The human's reason for a denial: the model reads it as the tool's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub by: Answerer,
    /// For [`ApprovalDecision::AllowSession`]: the rule the session keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Rule>,
    pub input_seq: u64,
}

impl ApprovalAskedEntry {
    /// The entry in words: `Orchestrator II asks to run bash: git push
    /// origin main (ask bash(git push*))`. The arguments are the model's:
    /// whoever shows this line makes it inert.
    pub fn line(&self) -> String {
        let what = subject(&self.request.tool, &self.request.input)
            .unwrap_or_else(|| self.request.input.to_string());
        format!(
            "{} asks to run {}: {what} ({})",
            crate::member_name(self.number, self.member),
            self.request.tool,
            self.request.rule
        )
    }
}

impl ApprovalAnsweredEntry {
    /// The entry in words: `allowed once by console alice`.
    pub fn line(&self) -> String {
        let what = match self.decision {
            ApprovalDecision::AllowOnce => "allowed once".to_owned(),
            ApprovalDecision::AllowSession => match &self.rule {
                Some(rule) => format!("allowed for this session (`{rule}`)"),
                None => "allowed for this session".to_owned(),
            },
            ApprovalDecision::Deny => "denied".to_owned(),
        };
        match &self.reason {
            Some(reason) => format!("{what} by {}: {reason}", self.by),
            None => format!("{what} by {}", self.by),
        }
    }
}

/// A console's answer, carried by a [`crate::HumanMessage`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalReply {
    pub approval: u32,
    pub decision: ApprovalDecision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An approval still waiting, as a session's status lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WaitingApproval {
    pub approval: u32,
    pub number: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub tool: String,
    /// The command or path, cut to 200 characters.
    pub summary: String,
    pub asked_at: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
}

#[cfg(test)]
mod tests;
