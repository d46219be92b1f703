//! Everything one model client needs, as data: which provider and model,
//! where and how to reach it, its output cap and limits, retries, timeouts.

use std::fmt;
use std::str::FromStr;

use crate::anthropic::{DEFAULT_ANTHROPIC_URL, DEFAULT_ANTHROPIC_VERSION};
use crate::openai::DEFAULT_OPENAI_URL;
use crate::{
    ApiKey, LlmError, ModelLimits, Result, RetryPolicy, Server, StructuredOutput, Timeouts,
};

/// Which API a model is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// The Anthropic Messages API.
    Anthropic,
    /// Any OpenAI-compatible Chat Completions server.
    OpenAi,
}

impl Provider {
    /// The prefix of a model spec: `anthropic` or `openai`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::Anthropic => DEFAULT_ANTHROPIC_URL,
            Provider::OpenAi => DEFAULT_OPENAI_URL,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = LlmError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "anthropic" => Ok(Provider::Anthropic),
            "openai" => Ok(Provider::OpenAi),
            other => Err(LlmError::Config(format!(
                "provider {other:?} is not supported; use anthropic:<model> or openai:<model>"
            ))),
        }
    }
}

/// Parses `provider:model` (`anthropic:claude-sonnet-5-5`, `openai:qwen2.5-coder`).
/// A bare model name means Anthropic. Only the first `:` splits, so model
/// names with colons (`openai:qwen2.5-coder:7b`) work.
pub fn parse_model_spec(spec: &str) -> Result<(Provider, String)> {
    let spec = spec.trim();
    let (provider, model) = match spec.split_once(':') {
        Some((provider, model)) => (provider.parse()?, model),
        None => (Provider::Anthropic, spec),
    };
    if model.trim().is_empty() {
        return Err(LlmError::Config(format!(
            "model spec {spec:?} names no model"
        )));
    }
    Ok((provider, model.trim().to_owned()))
}

/// The settings of one model client.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub provider: Provider,
    /// The model name as the provider knows it.
    pub model: String,
    /// Anthropic: without `/v1`. OpenAI-compatible: with or without `/v1`.
    pub base_url: String,
    /// Optional: local OpenAI-compatible servers need none.
    pub api_key: Option<ApiKey>,
    /// The `anthropic-version` header (Anthropic only).
    pub anthropic_version: String,
    /// The body field of the output cap (OpenAI-compatible only):
    /// `max_completion_tokens`, or `max_tokens` for older servers.
    pub max_tokens_field: String,
    /// The most output tokens asked for per reply; lowered to the model's
    /// own maximum when that is known.
    pub max_output_tokens: u64,
    /// Limits that override what the API reports (set fields only).
    pub limits: ModelLimits,
    pub retry: RetryPolicy,
    pub timeouts: Timeouts,
    /// How a turn's typed output is asked for (`structured_output`).
    pub structured_output: StructuredOutput,
    /// The server behind `base_url` (`server`); `None`: detected from the
    /// provider and URL (see [`Server::detect`]).
    pub server: Option<Server>,
    /// What the role asks of the model (`profile`): everything, or what a
    /// small local model does well.
    pub profile: Profile,
    /// The sampling temperature sent (`temperature`); `None`: the server's
    /// default, except under `profile = "small"`, which sends 0 (a small
    /// model's steps hold together far better greedy: ECOSYSTEM.md §3.4).
    pub temperature: Option<f32>,
}

/// The `profile` setting of a role: how much the role asks of its model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Profile {
    /// Every feature: for frontier models.
    #[default]
    Full,
    /// Only what a small local model handles well (docs/local-models.md
    /// says what each role leaves out).
    Small,
}

impl std::str::FromStr for Profile {
    type Err = LlmError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" => Ok(Self::Full),
            "small" => Ok(Self::Small),
            other => Err(LlmError::Config(format!(
                "profile must be \"full\" or \"small\", not {other:?}"
            ))),
        }
    }
}

impl ModelConfig {
    /// Defaults for the model a spec names.
    pub fn from_spec(spec: &str) -> Result<Self> {
        let (provider, model) = parse_model_spec(spec)?;
        Ok(Self::new(provider, model))
    }

    pub fn new(provider: Provider, model: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
            base_url: provider.default_base_url().to_owned(),
            api_key: None,
            anthropic_version: DEFAULT_ANTHROPIC_VERSION.to_owned(),
            max_tokens_field: "max_completion_tokens".to_owned(),
            max_output_tokens: 16_000,
            limits: ModelLimits::default(),
            retry: RetryPolicy::default(),
            timeouts: Timeouts::default(),
            structured_output: StructuredOutput::Auto,
            server: None,
            profile: Profile::Full,
            temperature: None,
        }
    }

    /// The server `auto` decides for: configured, else detected.
    pub fn server(&self) -> Server {
        self.server
            .unwrap_or_else(|| Server::detect(self.provider, &self.base_url))
    }

    /// How a call offering tools (or not) asks for its typed output.
    /// The temperature to send, if any (see [`ModelConfig::temperature`]).
    pub fn sampling_temperature(&self) -> Option<f32> {
        match (self.temperature, self.profile) {
            (Some(t), _) => Some(t),
            (None, Profile::Small) => Some(0.0),
            (None, Profile::Full) => None,
        }
    }

    /// `auto` under `profile = "small"` on a local server is the union
    /// mode: small models write no native calls (§3.4 of the ecosystem notes).
    pub fn output_mode(&self, has_tools: bool) -> crate::output::Mode {
        let local = !matches!(self.server(), Server::OpenAi | Server::Anthropic);
        if self.structured_output == StructuredOutput::Auto
            && self.profile == Profile::Small
            && local
        {
            return StructuredOutput::Union.resolve(self.server(), has_tools);
        }
        self.structured_output.resolve(self.server(), has_tools)
    }

    /// Whether a call's mode follows what the model does
    /// (`output::Habit`): `auto` under the full profile on a local server,
    /// where `tool` is the first choice and `union` the fallback for a
    /// model that writes no native calls. (Under `small`, `auto` is `union`
    /// from the first call.)
    pub fn adaptive_mode(&self) -> bool {
        self.structured_output == StructuredOutput::Auto
            && self.profile == Profile::Full
            && !matches!(self.server(), Server::OpenAi | Server::Anthropic)
    }

    /// `provider:model`, for logs.
    pub fn spec(&self) -> String {
        format!("{}:{}", self.provider, self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_specs() {
        assert_eq!(
            parse_model_spec("anthropic:claude-haiku-5-5").unwrap(),
            (Provider::Anthropic, "claude-haiku-5-5".to_owned())
        );
        assert_eq!(
            parse_model_spec("openai:qwen2.5-coder:7b").unwrap(),
            (Provider::OpenAi, "qwen2.5-coder:7b".to_owned())
        );
        assert_eq!(parse_model_spec("claude-x").unwrap().1, "claude-x");
        assert!(parse_model_spec("anthropic:").is_err());
        let unknown = parse_model_spec("gemini:x").unwrap_err().to_string();
        assert!(
            unknown.contains("provider \"gemini\" is not supported"),
            "{unknown}"
        );
        let config = ModelConfig::from_spec("openai:llama3").unwrap();
        assert_eq!(config.base_url, DEFAULT_OPENAI_URL);
        assert_eq!(config.spec(), "openai:llama3");
    }
}
