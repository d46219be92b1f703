//! `[budget.session]` and `[budget.orchestrator]` in the config file: the
//! default caps of every session and of each Orchestrator, in US dollars
//! and/or tokens. A console may change a session's caps (`/budget`); these
//! are what a session starts with. Read strictly: an unknown key, a negative
//! or non-numeric amount, or more than nine decimals of a dollar stops the
//! binary at start with the line and the field.

use std::fmt;

use arbiter_protocol::{Budget, Cap};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// `[budget]` as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetFile {
    /// `[budget.session]`: what a whole session may spend.
    #[serde(default)]
    pub session: CapFile,
    /// `[budget.orchestrator]`: what each Orchestrator may spend.
    #[serde(default)]
    pub orchestrator: CapFile,
}

/// One cap as written: `usd = 5`, `tokens = 2000000`, either or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapFile {
    #[serde(default)]
    pub usd: Option<Usd>,
    #[serde(default)]
    pub tokens: Option<Tokens>,
}

/// US dollars, held as nano-dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usd(pub u64);

/// A number of tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens(pub u64);

impl BudgetFile {
    /// The caps every session starts with.
    pub fn defaults(&self) -> Budget {
        Budget {
            session: self.session.cap(),
            orchestrator: self.orchestrator.cap(),
            held: false,
        }
    }

    /// [`BudgetFile::defaults`] for a session whose Arbiter runs on
    /// `profile`: under `small`, a session with no token cap written gets
    /// [`SMALL_SESSION_TOKENS`], as a small model that loses its way spends
    /// a million tokens on a task of a few lines.
    pub fn defaults_for(&self, profile: crate::Profile) -> Budget {
        let mut budget = self.defaults();
        if profile == crate::Profile::Small && budget.session.tokens.is_none() {
            budget.session.tokens = Some(SMALL_SESSION_TOKENS);
        }
        budget
    }
}

/// The session token cap a `profile = "small"` Arbiter gets when
/// `[budget.session]` sets none: the small tasks of #45 took 4,000 to
/// 30,000 tokens; the runs that lost their way, 1.07 to 1.52 million.
pub const SMALL_SESSION_TOKENS: u64 = 500_000;

impl CapFile {
    fn cap(&self) -> Cap {
        Cap {
            tokens: self.tokens.map(|t| t.0),
            cost_nanos: self.usd.map(|u| u.0),
        }
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Usd;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("usd: US dollars as a number, 0 or more (e.g. 5 or 0.50)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Usd, E> {
                v.checked_mul(1_000_000_000)
                    .map(Usd)
                    .ok_or_else(|| E::custom(format!("usd: {v} dollars is more than a cap can be")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Usd, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "usd: {v} is not an amount: write US dollars, 0 or more (e.g. 5 or 0.50)"
                    ))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Usd, E> {
                // Through its shortest text, so 0.1 is 100000000 nano-dollars exactly.
                let text = format!("{v}");
                match arbiter_protocol::budget::parse_usd(&text) {
                    Some(nanos) if v.is_finite() && v >= 0.0 => Ok(Usd(nanos)),
                    _ => Err(E::custom(format!(
                        "usd: {v} is not an amount: write US dollars, 0 or more, with at most \
                         9 decimals (e.g. 5 or 0.50)"
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Tokens;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("tokens: a whole number of tokens, 0 or more (e.g. 2000000)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tokens, E> {
                Ok(Tokens(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tokens, E> {
                u64::try_from(v).map(Tokens).map_err(|_| {
                    E::custom(format!(
                        "tokens: {v} is not a number of tokens: write a whole number, 0 or more"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigFile;

    /// A small Arbiter's session gets a token cap unless the file writes one.
    #[test]
    fn a_small_profile_session_gets_a_token_cap_by_default() {
        use crate::Profile;
        let none = ConfigFile::parse("").unwrap().budget;
        assert_eq!(none.defaults_for(Profile::Full), Budget::default());
        assert_eq!(
            none.defaults_for(Profile::Small).session.tokens,
            Some(SMALL_SESSION_TOKENS)
        );
        let usd = ConfigFile::parse("[budget.session]\nusd = 1\n")
            .unwrap()
            .budget;
        let small = usd.defaults_for(Profile::Small).session;
        assert_eq!(small.tokens, Some(SMALL_SESSION_TOKENS));
        assert_eq!(small.cost_nanos, Some(1_000_000_000));
        let written = ConfigFile::parse("[budget.session]\ntokens = 3000000\n")
            .unwrap()
            .budget;
        assert_eq!(
            written.defaults_for(Profile::Small).session.tokens,
            Some(3_000_000)
        );
        assert_eq!(
            none.defaults_for(Profile::Small).orchestrator,
            Cap::default()
        );
    }

    #[test]
    fn caps_read_from_the_file() {
        let file = ConfigFile::parse(
            "[budget.session]\nusd = 5.25\ntokens = 2000000\n\n[budget.orchestrator]\nusd = 1\n",
        )
        .unwrap();
        let budget = file.budget.defaults();
        assert_eq!(
            budget.session,
            Cap {
                tokens: Some(2_000_000),
                cost_nanos: Some(5_250_000_000)
            }
        );
        assert_eq!(
            budget.orchestrator,
            Cap {
                tokens: None,
                cost_nanos: Some(1_000_000_000)
            }
        );
        let none = ConfigFile::parse("").unwrap().budget.defaults();
        assert_eq!(none, Budget::default());
        let tenth = ConfigFile::parse("[budget.session]\nusd = 0.1\n").unwrap();
        assert_eq!(
            tenth.budget.defaults().session.cost_nanos,
            Some(100_000_000)
        );
    }

    #[test]
    fn a_malformed_cap_names_its_line_and_field() {
        for (text, says) in [
            (
                "[budget.session]\nusd = \"five\"\n",
                "usd: US dollars as a number",
            ),
            ("[budget.session]\nusd = -1\n", "usd: -1 is not an amount"),
            (
                "[budget.session]\nusd = 0.0000000001\n",
                "usd: 0.0000000001 is not an amount",
            ),
            (
                "[budget.orchestrator]\ntokens = -5\n",
                "tokens: -5 is not a number of tokens",
            ),
            (
                "[budget.orchestrator]\ntokens = 1.5\n",
                "tokens: a whole number of tokens",
            ),
            ("[budget.session]\ndollars = 5\n", "unknown field `dollars`"),
            ("[budget.galaxy]\nusd = 5\n", "unknown field `galaxy`"),
        ] {
            let err = ConfigFile::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(
                err.contains("line 2") || err.contains("line 1"),
                "{text}: {err}"
            );
        }
    }
}
