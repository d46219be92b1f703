//! What a model request costs: a price table per model (input, output,
//! cache write, cache read, in US dollars per million tokens), with defaults
//! for the current Claude and OpenAI models that the config file's
//! `[prices."<model>"]` sections override or extend. A model the table does
//! not know has no cost: its tokens are counted and its cost is unknown,
//! never guessed.
//!
//! Money is counted in nano-dollars (10⁻⁹ USD) as integers: a price with at
//! most three decimals per million tokens is a whole number of nano-dollars
//! per token, so every sum is exact and the same on every machine.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use arbiter_protocol::Spend;

use crate::Usage;

/// A price per token, in nano-dollars (= USD per million tokens × 1000).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rate(pub u64);

impl Rate {
    /// `usd` dollars per million tokens; `None` for a negative, non-finite
    /// or more than three-decimal figure.
    pub fn per_million(usd: f64) -> Option<Self> {
        if !usd.is_finite() || !(0.0..=1e9).contains(&usd) {
            return None;
        }
        let scaled = usd * 1000.0;
        let whole = scaled.round();
        ((scaled - whole).abs() < 1e-6).then_some(Rate(whole as u64))
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let usd = f64::deserialize(d)?;
        Rate::per_million(usd).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{usd} is not a price: write US dollars per million tokens, 0 or more, \
                 with at most 3 decimals (e.g. 3.75)"
            ))
        })
    }
}

/// The four prices of a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    pub input: Rate,
    pub output: Rate,
    /// Input tokens written to the prompt cache.
    pub cache_write: Rate,
    /// Input tokens read from the prompt cache.
    pub cache_read: Rate,
}

/// A model's price; some models cost more per token when the prompt is long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub rates: Rates,
    pub long_prompt: Option<LongPrompt>,
}

/// Rates for every token of a request whose prompt (input, cache write and
/// cache read) is longer than `above_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongPrompt {
    pub above_tokens: u64,
    pub rates: Rates,
}

/// `[prices."<model>"]` as written in the config file: all four prices are
/// required, so that none is ever taken as 0 by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceFile {
    pub input: Rate,
    pub output: Rate,
    pub cache_write: Rate,
    pub cache_read: Rate,
    /// `[prices."<model>".long_prompt]`: `above_tokens` and the four prices.
    #[serde(default)]
    pub long_prompt: Option<LongPromptFile>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongPromptFile {
    pub above_tokens: u64,
    pub input: Rate,
    pub output: Rate,
    pub cache_write: Rate,
    pub cache_read: Rate,
}

impl From<PriceFile> for Price {
    fn from(f: PriceFile) -> Self {
        Price {
            rates: Rates {
                input: f.input,
                output: f.output,
                cache_write: f.cache_write,
                cache_read: f.cache_read,
            },
            long_prompt: f.long_prompt.map(|l| LongPrompt {
                above_tokens: l.above_tokens,
                rates: Rates {
                    input: l.input,
                    output: l.output,
                    cache_write: l.cache_write,
                    cache_read: l.cache_read,
                },
            }),
        }
    }
}

impl Price {
    /// The cost of one request, in nano-dollars.
    pub fn cost(&self, usage: &Usage) -> u64 {
        let rates = match self.long_prompt {
            Some(long) if usage.total_input() > long.above_tokens => long.rates,
            _ => self.rates,
        };
        usage.input_tokens * rates.input.0
            + usage.output_tokens * rates.output.0
            + usage.cache_creation_input_tokens * rates.cache_write.0
            + usage.cache_read_input_tokens * rates.cache_read.0
    }
}

/// The prices of the models this deployment may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceTable(BTreeMap<String, Price>);

impl Default for PriceTable {
    fn default() -> Self {
        Self::defaults()
    }
}

/// Dollars per million tokens: input, output, cache write (5 minutes),
/// cache read. From the providers' published price pages, checked on
/// 2026-11-26 (see docs/observability.md). Override them in the config
/// file when your contract differs.
const DEFAULTS: &[(&str, [f64; 4])] = &[
    // Anthropic
    ("claude-fable-5-1", [10.0, 50.0, 12.5, 0.25]),
    ("claude-opus-5-5", [4.0, 20.0, 5.0, 0.2]),
    ("claude-sonnet-5-5", [2.0, 10.0, 2.5, 0.1]),
    ("claude-opus-5", [5.0, 25.0, 6.25, 0.5]),
    ("claude-sonnet-5", [2.0, 10.0, 2.5, 0.2]),
    ("claude-opus-4-8", [5.0, 25.0, 6.25, 0.5]),
    ("claude-opus-4-7", [5.0, 25.0, 6.25, 0.5]),
    ("claude-opus-4-6", [5.0, 25.0, 6.25, 0.5]),
    ("claude-opus-4-5", [5.0, 25.0, 6.25, 0.5]),
    ("claude-sonnet-4-6", [3.0, 15.0, 3.75, 0.3]),
    ("claude-sonnet-4-5", [3.0, 15.0, 3.75, 0.3]),
    ("claude-haiku-4-5", [1.0, 5.0, 1.25, 0.1]),
    // OpenAI (no charge for cache writes)
    ("gpt-5", [1.25, 10.0, 0.0, 0.125]),
    ("gpt-5-mini", [0.25, 2.0, 0.0, 0.025]),
    ("gpt-5-nano", [0.05, 0.4, 0.0, 0.005]),
    ("gpt-4.1", [2.0, 8.0, 0.0, 0.5]),
    ("gpt-4.1-mini", [0.4, 1.6, 0.0, 0.1]),
    ("gpt-4.1-nano", [0.1, 0.4, 0.0, 0.025]),
    ("gpt-4o", [2.5, 10.0, 0.0, 1.25]),
    ("gpt-4o-mini", [0.15, 0.6, 0.0, 0.075]),
];

fn rates([input, output, cache_write, cache_read]: [f64; 4]) -> Rates {
    let rate = |usd| Rate::per_million(usd).unwrap_or_default();
    Rates {
        input: rate(input),
        output: rate(output),
        cache_write: rate(cache_write),
        cache_read: rate(cache_read),
    }
}

impl PriceTable {
    /// The built-in prices.
    pub fn defaults() -> Self {
        let mut table: BTreeMap<String, Price> = DEFAULTS
            .iter()
            .map(|(model, usd)| {
                (
                    (*model).to_owned(),
                    Price {
                        rates: rates(*usd),
                        long_prompt: None,
                    },
                )
            })
            .collect();
        // Haiku 5.5 is priced in two bands by prompt length.
        table.insert(
            "claude-haiku-5-5".to_owned(),
            Price {
                rates: rates([0.1, 0.5, 0.125, 0.01]),
                long_prompt: Some(LongPrompt {
                    above_tokens: 100_000,
                    rates: rates([0.5, 2.5, 0.625, 0.05]),
                }),
            },
        );
        Self(table)
    }

    /// An empty table: every model's cost unknown.
    pub fn empty() -> Self {
        Self(BTreeMap::new())
    }

    /// The defaults, with the config file's prices over them.
    pub fn with(mut self, overrides: &BTreeMap<String, PriceFile>) -> Self {
        for (model, price) in overrides {
            self.0.insert(model.clone(), Price::from(*price));
        }
        self
    }

    /// A model's price: its exact name, else the name without a dated
    /// snapshot suffix (`claude-haiku-4-5-20251001` → `claude-haiku-4-5`).
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.0.get(model).or_else(|| {
            let (base, date) = model.rsplit_once('-')?;
            (date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()))
                .then(|| self.0.get(base))
                .flatten()
        })
    }

    /// The cost of one request in nano-dollars; `None` for a model with no price.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<u64> {
        self.price(model).map(|price| price.cost(usage))
    }

    /// Adds one request of `model` to `spend`: its tokens, and its cost
    /// when the model has a price (`usage` `None`: the server reported none).
    pub fn charge(&self, spend: &mut Spend, model: &str, usage: Option<&Usage>) {
        match usage {
            Some(u) => spend.record(
                Some([
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_creation_input_tokens,
                    u.cache_read_input_tokens,
                ]),
                self.cost(model, u),
            ),
            None => spend.record(None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, write: u64, read: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: write,
            cache_read_input_tokens: read,
        }
    }

    #[test]
    fn costs_are_exact_integers() {
        let table = PriceTable::defaults();
        // 1000 × $4/M + 100 × $20/M + 300 × $5/M + 2000 × $0.20/M
        assert_eq!(
            table.cost("claude-opus-5-5", &usage(1000, 100, 300, 2000)),
            Some(4_000_000 + 2_000_000 + 1_500_000 + 400_000)
        );
        assert_eq!(
            table.cost("claude-haiku-4-5-20251001", &usage(1, 0, 0, 0)),
            Some(1000)
        );
        assert_eq!(table.cost("my-local-model", &usage(1, 1, 0, 0)), None);
    }

    #[test]
    fn a_long_prompt_pays_the_higher_band_on_every_token() {
        let table = PriceTable::defaults();
        let short = table.cost("claude-haiku-5-5", &usage(100_000, 10, 0, 0));
        let long = table.cost("claude-haiku-5-5", &usage(100_001, 10, 0, 0));
        assert_eq!(short, Some(100_000 * 100 + 10 * 500));
        assert_eq!(long, Some(100_001 * 500 + 10 * 2500));
    }

    #[test]
    fn rates_take_three_decimals_at_most() {
        assert_eq!(Rate::per_million(0.075), Some(Rate(75)));
        assert_eq!(Rate::per_million(3.75), Some(Rate(3750)));
        assert_eq!(Rate::per_million(0.0001), None);
        assert_eq!(Rate::per_million(-1.0), None);
    }

    /// What the user sees at start for a bad `[prices]` section: the line
    /// and the field (the binaries print it and exit).
    #[test]
    fn a_malformed_price_table_is_refused_with_its_line_and_field() {
        let refused = |text: &str| crate::ConfigFile::parse(text).unwrap_err().to_string();
        let head = "[prices.\"my-model\"]\n";
        let e = refused(&format!(
            "{head}input = 3\noutput = \"fifteen\"\ncache_write = 0\ncache_read = 0\n"
        ));
        assert!(
            e.contains("line 3") && e.contains("output = \"fifteen\""),
            "{e}"
        );
        let e = refused(&format!(
            "{head}input = -1\noutput = 15\ncache_write = 0\ncache_read = 0\n"
        ));
        assert!(e.contains("line 2") && e.contains("input = -1"), "{e}");
        assert!(e.contains("-1 is not a price"), "{e}");
        let e = refused(&format!("{head}input = 3\noutput = 15\ncache_write = 0\n"));
        assert!(
            e.contains("line 1") && e.contains("missing field `cache_read`"),
            "{e}"
        );
        let e = refused(&format!(
            "{head}input = 3\noutput = 15\ncache_write = 0\ncache_read = 0\ncached = 1\n"
        ));
        assert!(
            e.contains("line 6") && e.contains("unknown field `cached`"),
            "{e}"
        );
        let file = crate::ConfigFile::parse(&format!(
            "{head}input = 3\noutput = 15\ncache_write = 0\ncache_read = 0.3\n\
             [prices.\"claude-opus-5-5\"]\ninput = 1\noutput = 2\ncache_write = 3\ncache_read = 4\n"
        ))
        .unwrap();
        let table = file.price_table();
        assert_eq!(
            table.cost("my-model", &usage(1, 1, 0, 1)),
            Some(3000 + 15000 + 300)
        );
        assert_eq!(
            table.cost("claude-opus-5-5", &usage(1, 1, 1, 1)),
            Some(10_000)
        );
        assert!(table.price("claude-sonnet-5-5").is_some());
    }
}
