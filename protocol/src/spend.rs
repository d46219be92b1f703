//! What model requests cost, added up: per Arbiter, per Orchestrator (its
//! subagents included) and per session. Money is in nano-dollars (10⁻⁹ USD)
//! as integers, so that every sum is exact; a request whose model has no
//! price, or whose server reported no usage, is counted as such and never
//! given a made-up cost.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tokens and money spent by a set of model requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Spend {
    /// Model requests answered.
    #[serde(default)]
    pub requests: u64,
    /// Input tokens neither written to nor read from the prompt cache.
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// The cost of the requests whose cost is known, in nano-dollars.
    #[serde(default)]
    pub cost_nanos: u64,
    /// Requests whose model has no price: tokens counted, cost unknown.
    #[serde(default)]
    pub unpriced: u64,
    /// Requests whose server reported no usage: tokens and cost unknown.
    #[serde(default)]
    pub unmetered: u64,
}

impl Spend {
    /// Adds one request: its tokens (input, output, cache write, cache
    /// read) when the server reported them, and its cost when known.
    pub fn record(&mut self, tokens: Option<[u64; 4]>, cost_nanos: Option<u64>) {
        self.requests += 1;
        match tokens {
            Some([input, output, write, read]) => {
                self.input_tokens += input;
                self.output_tokens += output;
                self.cache_write_tokens += write;
                self.cache_read_tokens += read;
                match cost_nanos {
                    Some(cost) => self.cost_nanos += cost,
                    None => self.unpriced += 1,
                }
            }
            None => self.unmetered += 1,
        }
    }

    /// The sum of two spends.
    pub fn plus(&self, other: &Spend) -> Spend {
        Spend {
            requests: self.requests + other.requests,
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            cache_write_tokens: self.cache_write_tokens + other.cache_write_tokens,
            cache_read_tokens: self.cache_read_tokens + other.cache_read_tokens,
            cost_nanos: self.cost_nanos + other.cost_nanos,
            unpriced: self.unpriced + other.unpriced,
            unmetered: self.unmetered + other.unmetered,
        }
    }

    /// Every token counted.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_write_tokens + self.cache_read_tokens
    }

    /// Whether `cost_nanos` is the whole cost (no request of unknown cost).
    pub fn cost_known(&self) -> bool {
        self.unpriced == 0 && self.unmetered == 0
    }

    /// For people: `$0.0123`, `$1.25`; `$0.0123 + unknown` when some
    /// requests have no known cost; `unknown` when none has.
    pub fn cost_text(&self) -> String {
        let known = self.requests - self.unpriced - self.unmetered;
        if known == 0 && self.requests > 0 {
            return "cost unknown".to_owned();
        }
        let usd = format_usd(self.cost_nanos);
        if self.cost_known() {
            usd
        } else {
            format!("{usd} + unknown")
        }
    }
}

/// Nano-dollars as dollars: four decimals under a dollar, two above.
pub fn format_usd(nanos: u64) -> String {
    let usd = nanos as f64 / 1e9;
    if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

/// One Orchestrator's spend within its session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OrchestratorSpend {
    pub orch_id: String,
    /// I = 1, II = 2…
    pub number: u32,
    pub spend: Spend,
}

/// A session's spend: its Arbiter's, each of its Orchestrators', and the sum.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionSpend {
    /// The Arbiter plus every Orchestrator.
    #[serde(default)]
    pub total: Spend,
    #[serde(default)]
    pub arbiter: Spend,
    /// In the order they were summoned.
    #[serde(default)]
    pub orchestrators: Vec<OrchestratorSpend>,
}

impl SessionSpend {
    /// Recomputes `total` from its parts.
    pub fn sum(&mut self) {
        self.total = self
            .orchestrators
            .iter()
            .fold(self.arbiter, |sum, o| sum.plus(&o.spend));
    }

    /// Sets an Orchestrator's spend (its figure so far, not an increment).
    pub fn set_orchestrator(&mut self, orch_id: &str, number: u32, spend: Spend) {
        match self.orchestrators.iter_mut().find(|o| o.orch_id == orch_id) {
            Some(o) => o.spend = spend,
            None => self.orchestrators.push(OrchestratorSpend {
                orch_id: orch_id.to_owned(),
                number,
                spend,
            }),
        }
        self.sum();
    }

    pub fn orchestrator(&self, orch_id: &str) -> Option<&Spend> {
        self.orchestrators
            .iter()
            .find(|o| o.orch_id == orch_id)
            .map(|o| &o.spend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_costs_are_never_zero() {
        let mut s = Spend::default();
        s.record(Some([10, 2, 0, 0]), Some(500));
        assert_eq!(s.cost_text(), "$0.0000");
        s.record(Some([10, 2, 0, 0]), None);
        assert_eq!(s.cost_text(), "$0.0000 + unknown");
        let mut local = Spend::default();
        local.record(Some([10, 2, 0, 0]), None);
        assert_eq!(local.cost_text(), "cost unknown");
        assert_eq!(local.tokens(), 12);
    }
}
