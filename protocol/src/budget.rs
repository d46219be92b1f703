//! Budgets: caps on what model requests may spend, in tokens or money
//! (nano-dollars, as [`Spend`] counts them), for a whole session and for
//! each Orchestrator. The coordinator keeps a session's caps, holds its
//! Arbiter at the session cap, and hands each Orchestrator an allowance in
//! its summons and inputs, which its worker enforces before every model
//! request. The `/budget` command a console sends is parsed here too, so
//! every console reads it the same way.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Spend;
use crate::spend::format_usd;

/// How much of a cap is used when the Arbiter is told to wrap up: 80 %.
pub const NOTE_AT_PERCENT: u64 = 80;

/// Limits on spend: tokens, money, both or neither. Each absent limit is
/// no limit. A spend has reached the cap when it reached either limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Cap {
    /// Every token counted ([`Spend::tokens`]: input, output, cache write
    /// and cache read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Money, in nano-dollars (10⁻⁹ USD), of the requests whose cost is
    /// known ([`Spend::cost_nanos`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
}

/// One of a cap's two limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Tokens,
    Money,
}

impl Unit {
    /// `tokens` or `cost`: how a limit is named in keys and documents.
    pub fn key(self) -> &'static str {
        match self {
            Unit::Tokens => "tokens",
            Unit::Money => "cost",
        }
    }

    /// An amount of this unit, for people: `$5.00`, `2,000,000 tokens`.
    pub fn amount(self, n: u64) -> String {
        match self {
            Unit::Tokens => format!("{} tokens", thousands(n)),
            Unit::Money => format_usd(n),
        }
    }

    /// What `spend` used of this unit.
    pub fn used(self, spend: &Spend) -> u64 {
        match self {
            Unit::Tokens => spend.tokens(),
            Unit::Money => spend.cost_nanos,
        }
    }
}

impl Cap {
    /// No limit at all.
    pub const NONE: Cap = Cap {
        tokens: None,
        cost_nanos: None,
    };

    pub fn is_none(&self) -> bool {
        self.tokens.is_none() && self.cost_nanos.is_none()
    }

    /// The limits set, each with its unit.
    pub fn limits(&self) -> impl Iterator<Item = (Unit, u64)> {
        [(Unit::Money, self.cost_nanos), (Unit::Tokens, self.tokens)]
            .into_iter()
            .filter_map(|(unit, limit)| limit.map(|l| (unit, l)))
    }

    /// The first limit `spend` has reached, if any: no new model request
    /// may start once one is.
    pub fn reached(&self, spend: &Spend) -> Option<(Unit, u64)> {
        self.limits()
            .find(|(unit, limit)| unit.used(spend) >= *limit)
    }

    /// The limits `spend` has used `percent` % of or more.
    pub fn past(&self, spend: &Spend, percent: u64) -> Vec<(Unit, u64)> {
        self.limits()
            .filter(|(unit, limit)| {
                u128::from(unit.used(spend)) * 100 >= u128::from(*limit) * u128::from(percent)
            })
            .collect()
    }

    /// The stricter of two caps, limit by limit.
    pub fn min(&self, other: &Cap) -> Cap {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Cap {
            tokens: min(self.tokens, other.tokens),
            cost_nanos: min(self.cost_nanos, other.cost_nanos),
        }
    }

    /// What is left of this cap after `spend` (0 for a limit reached).
    pub fn left(&self, spend: &Spend) -> Cap {
        Cap {
            tokens: self.tokens.map(|t| t.saturating_sub(spend.tokens())),
            cost_nanos: self.cost_nanos.map(|c| c.saturating_sub(spend.cost_nanos)),
        }
    }

    /// This cap moved up by `spend`: the same room, counted from zero
    /// rather than from `spend`.
    pub fn after(&self, spend: &Spend) -> Cap {
        Cap {
            tokens: self.tokens.map(|t| t.saturating_add(spend.tokens())),
            cost_nanos: self.cost_nanos.map(|c| c.saturating_add(spend.cost_nanos)),
        }
    }

    /// This cap with one limit set, or both removed.
    pub fn with(&self, limit: BudgetLimit) -> Cap {
        match limit {
            BudgetLimit::Tokens(t) => Cap {
                tokens: Some(t),
                ..*self
            },
            BudgetLimit::CostNanos(c) => Cap {
                cost_nanos: Some(c),
                ..*self
            },
            BudgetLimit::Off => Cap::NONE,
        }
    }

    /// For people: `$5.00`, `2,000,000 tokens`, `$5.00 or 2,000,000
    /// tokens`, `none`.
    pub fn text(&self) -> String {
        let parts: Vec<String> = self.limits().map(|(u, l)| u.amount(l)).collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(" or ")
        }
    }

    /// What is left, for people: `$3.21 of $5.00 left`, or `no cap`.
    pub fn left_text(&self, spend: &Spend) -> String {
        let parts: Vec<String> = self
            .limits()
            .map(|(unit, limit)| {
                let left = limit.saturating_sub(unit.used(spend));
                format!("{} of {} left", unit.amount(left), unit.amount(limit))
            })
            .collect();
        if parts.is_empty() {
            "no cap".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// A session's caps, as its status shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// What the whole session (its Arbiter and every Orchestrator) may spend.
    #[serde(default)]
    pub session: Cap,
    /// What each Orchestrator may spend, counted from its summons.
    #[serde(default)]
    pub orchestrator: Cap,
    /// The session holds at its cap: no Arbiter turn starts until it is raised.
    #[serde(default)]
    pub held: bool,
}

/// Which cap a `/budget` command sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// The whole session: its Arbiter and every Orchestrator, together.
    Session,
    /// Each Orchestrator, on its own, from its summons.
    Orchestrator,
}

impl BudgetScope {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Session => "session",
            BudgetScope::Orchestrator => "orchestrator",
        }
    }
}

/// The limit a `/budget` command sets; the scope's other limit stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLimit {
    /// A token cap.
    Tokens(u64),
    /// A money cap, in nano-dollars.
    CostNanos(u64),
    /// No cap at all for the scope (both limits removed).
    Off,
}

/// `/budget <scope> <amount>`: a change to one of the session's caps,
/// carried on a [`crate::HumanMessage`] and stored by the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetChange {
    pub scope: BudgetScope,
    pub limit: BudgetLimit,
}

/// What a line starting `/budget` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetCommand {
    /// `/budget` alone: show the caps and what is left.
    Show,
    /// Change a cap.
    Set(BudgetChange),
}

/// How to write the command, for error messages and help.
pub const BUDGET_USAGE: &str = "write /budget session <amount> or /budget orchestrator \
     <amount>, the amount being money ($5, $0.50, 5 USD), tokens (2M tokens, 500k tokens, \
     120000 tokens) or off; /budget alone shows the caps";

/// Reads a typed line: `None` when it is not a `/budget` command, else the
/// command or what is wrong with it (in words for the human).
pub fn parse_command(line: &str) -> Option<Result<BudgetCommand, String>> {
    let mut words = line.split_whitespace();
    if words.next() != Some("/budget") {
        return None;
    }
    let words: Vec<&str> = words.collect();
    let Some((scope, amount)) = words.split_first() else {
        return Some(Ok(BudgetCommand::Show));
    };
    let scope = match scope.to_ascii_lowercase().as_str() {
        "session" => BudgetScope::Session,
        "orchestrator" | "orchestrators" => BudgetScope::Orchestrator,
        other => {
            return Some(Err(format!(
                "{other:?} is not a cap: say which, session or orchestrator ({BUDGET_USAGE})"
            )));
        }
    };
    if amount.is_empty() {
        return Some(Err(format!(
            "the {} cap needs an amount ({BUDGET_USAGE})",
            scope.as_str()
        )));
    }
    Some(
        parse_limit(&amount.join(" "))
            .map(|limit| BudgetCommand::Set(BudgetChange { scope, limit })),
    )
}

/// `$5`, `$0.50`, `5 USD`, `2M tokens`, `500k tokens`, `120000 tokens`, `off`.
pub fn parse_limit(text: &str) -> Result<BudgetLimit, String> {
    let t = text.trim().to_ascii_lowercase();
    let wrong = || format!("{text:?} is not an amount: {BUDGET_USAGE}");
    if matches!(t.as_str(), "off" | "none") {
        return Ok(BudgetLimit::Off);
    }
    if let Some(rest) = t.strip_prefix('$') {
        return parse_usd(rest.trim())
            .map(BudgetLimit::CostNanos)
            .ok_or_else(wrong);
    }
    for suffix in ["usd", "dollars", "$"] {
        if let Some(rest) = t.strip_suffix(suffix) {
            return parse_usd(rest.trim())
                .map(BudgetLimit::CostNanos)
                .ok_or_else(wrong);
        }
    }
    for suffix in ["tokens", "token"] {
        if let Some(rest) = t.strip_suffix(suffix) {
            return parse_tokens(rest.trim())
                .map(BudgetLimit::Tokens)
                .ok_or_else(wrong);
        }
    }
    Err(wrong())
}

/// Dollars written with at most 9 decimals, as nano-dollars, exactly.
pub fn parse_usd(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.len() > 9 {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let frac: u64 = format!("{frac:0<9}").parse().ok()?;
    whole.checked_mul(1_000_000_000)?.checked_add(frac)
}

/// `120000`, `500k`, `2M`, `1.5M`, `2,000,000`.
fn parse_tokens(text: &str) -> Option<u64> {
    let text = text.replace([',', '_'], "");
    let (number, scale) = match text.chars().last()? {
        'k' => (&text[..text.len() - 1], 1_000u64),
        'm' => (&text[..text.len() - 1], 1_000_000),
        'b' | 'g' => (&text[..text.len() - 1], 1_000_000_000),
        _ => (text.as_str(), 1),
    };
    let number = number.trim();
    // Exact arithmetic: at most as many decimals as the scale allows.
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let places = scale.ilog10() as usize;
    if whole.is_empty() || frac.len() > places {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<places$}").parse().ok()?
    };
    whole.checked_mul(scale)?.checked_add(frac)
}

/// `2000000` as `2,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(scope: BudgetScope, limit: BudgetLimit) -> Option<Result<BudgetCommand, String>> {
        Some(Ok(BudgetCommand::Set(BudgetChange { scope, limit })))
    }

    #[test]
    fn commands_read_as_the_human_writes_them() {
        use BudgetLimit::*;
        use BudgetScope::*;
        assert_eq!(parse_command("/budget"), Some(Ok(BudgetCommand::Show)));
        assert_eq!(parse_command("hello /budget"), None);
        assert_eq!(parse_command("/budgets"), None);
        assert_eq!(
            parse_command("/budget session $5"),
            set(Session, CostNanos(5_000_000_000))
        );
        assert_eq!(
            parse_command("/budget Orchestrator $0.50"),
            set(Orchestrator, CostNanos(500_000_000))
        );
        assert_eq!(
            parse_command("/budget session 2.5 USD"),
            set(Session, CostNanos(2_500_000_000))
        );
        assert_eq!(
            parse_command("/budget orchestrator 2M tokens"),
            set(Orchestrator, Tokens(2_000_000))
        );
        assert_eq!(
            parse_command("/budget session 1.5m tokens"),
            set(Session, Tokens(1_500_000))
        );
        assert_eq!(
            parse_command("/budget session 500k tokens"),
            set(Session, Tokens(500_000))
        );
        assert_eq!(
            parse_command("/budget session 120,000 tokens"),
            set(Session, Tokens(120_000))
        );
        assert_eq!(parse_command("/budget session off"), set(Session, Off));
        for bad in [
            "/budget session five",
            "/budget session 5",
            "/budget session $",
            "/budget session $-1",
            "/budget session $1.0000000001",
            "/budget session 1.5k2 tokens",
            "/budget session 0.0001k tokens",
            "/budget galaxy $5",
            "/budget session",
        ] {
            let got = parse_command(bad);
            assert!(matches!(got, Some(Err(_))), "{bad}: {got:?}");
        }
        let Some(Err(why)) = parse_command("/budget session five dollars") else {
            panic!("accepted");
        };
        assert!(
            why.starts_with("\"five dollars\" is not an amount: write /budget session"),
            "{why}"
        );
    }

    #[test]
    fn a_cap_is_reached_at_either_limit_and_told_at_80_percent() {
        let cap = Cap {
            tokens: Some(1000),
            cost_nanos: Some(5_000_000),
        };
        let mut spend = Spend::default();
        spend.record(Some([700, 99, 0, 0]), Some(1_000_000));
        assert_eq!(cap.reached(&spend), None);
        assert!(cap.past(&spend, NOTE_AT_PERCENT).is_empty());
        spend.record(Some([1, 0, 0, 0]), Some(1));
        assert_eq!(cap.past(&spend, NOTE_AT_PERCENT), [(Unit::Tokens, 1000)]);
        spend.record(Some([200, 0, 0, 0]), Some(1));
        assert_eq!(cap.reached(&spend), Some((Unit::Tokens, 1000)));
        assert_eq!(cap.text(), "$0.0050 or 1,000 tokens");
        assert_eq!(
            cap.left_text(&spend),
            "$0.0040 of $0.0050 left, 0 tokens of 1,000 tokens left"
        );
        assert_eq!(Cap::NONE.reached(&spend), None);
        assert_eq!(Cap::NONE.text(), "none");
        let session = Cap {
            tokens: Some(5000),
            cost_nanos: None,
        };
        assert_eq!(
            cap.min(&session),
            Cap {
                tokens: Some(1000),
                cost_nanos: Some(5_000_000)
            }
        );
        assert_eq!(session.left(&spend).tokens, Some(5000 - 1000));
        assert_eq!(session.with(BudgetLimit::CostNanos(7)).cost_nanos, Some(7));
        assert_eq!(session.with(BudgetLimit::Off), Cap::NONE);
        assert_eq!(thousands(2_000_000), "2,000,000");
        assert_eq!(thousands(999), "999");
    }
}
