//! Model configuration per role (Arbiter, Orchestrator, subagent): a TOML
//! file read into a raw struct that rejects unknown keys, resolved with the
//! values of flags and the environment into a concrete [`RoleConfig`].
//! Precedence: flag > env > file > default (clap merges the first two), with
//! one refinement for how a role reaches its provider: a role's own
//! `base_url` and `api_key_env` win over the provider-wide flags and
//! variables (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, …), which win over the
//! file's `[openai]` / `[anthropic]` sections. See [`resolve`].

use std::path::Path;
use std::time::Duration;

use arbiter_protocol::Role;
use serde::Deserialize;

use crate::{
    ApiKey, LlmError, ModelConfig, ModelLimits, Provider, Result, RetryPolicy, Timeouts,
    parse_model_spec,
};

/// The default model of each role: a strong one for Orchestrators, a fast
/// one for the Arbiter, one in between for subagents.
pub fn default_model(role: Role) -> &'static str {
    match role {
        Role::Arbiter => "anthropic:claude-haiku-5-5",
        Role::Orchestrator => "anthropic:claude-opus-5-5",
        Role::Subagent => "anthropic:claude-sonnet-5-5",
    }
}

/// Tokens of context a role may use unless configured: what its context
/// percentage is measured against. Lower than the models' windows on purpose.
pub const DEFAULT_CONTEXT_BUDGET: u64 = 200_000;
/// Times a reply that does not match its schema is sent back, by default.
pub const DEFAULT_SCHEMA_REPAIRS: u32 = 2;

fn default_max_output(role: Role) -> u64 {
    match role {
        Role::Arbiter => 8_000,
        Role::Orchestrator | Role::Subagent => 32_000,
    }
}

/// The configuration file, as written. Unknown keys are errors.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub anthropic: ProviderFile,
    #[serde(default)]
    pub openai: ProviderFile,
    #[serde(default)]
    pub retry: RetryFile,
    #[serde(default)]
    pub timeouts: TimeoutsFile,
    #[serde(default)]
    pub arbiter: RoleFile,
    #[serde(default)]
    pub orchestrator: RoleFile,
    #[serde(default)]
    pub subagent: RoleFile,
    /// `[prices."<model>"]`: prices over the built-in ones (see [`crate::price`]).
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, crate::price::PriceFile>,
    /// `[budget.session]`, `[budget.orchestrator]`: the default caps (see [`crate::budget`]).
    #[serde(default)]
    pub budget: crate::budget::BudgetFile,
    /// `[[hooks]]`: the coordinator's webhooks, as written; read and
    /// checked by the coordinator (`arbiter_coordinator::notify`), ignored
    /// by the other binaries.
    #[serde(default)]
    pub hooks: Vec<toml::Table>,
    /// `[mcp_servers.<name>]`: a worker's MCP servers, as written; read and
    /// checked by the worker (`arbiter_worker::mcp`), ignored by the other
    /// binaries.
    #[serde(default)]
    pub mcp_servers: std::collections::BTreeMap<String, toml::Table>,
    /// `[checkpoints]`: what a worker does with the branch an
    /// Orchestrator's work is handed over on, as written; read and checked
    /// by the worker (`arbiter_worker::checkpoint`), ignored by the others.
    #[serde(default)]
    pub checkpoints: toml::Table,
}

/// `[anthropic]` / `[openai]`: how every role on that provider reaches it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderFile {
    pub base_url: Option<String>,
    /// The environment variable holding the key; keys never go in the file.
    pub api_key_env: Option<String>,
    /// `anthropic-version` (Anthropic only).
    pub version: Option<String>,
    /// `max_completion_tokens` or `max_tokens` (OpenAI-compatible only).
    pub max_tokens_field: Option<String>,
    /// The server behind `base_url`: what `structured_output = "auto"` decides for.
    pub server: Option<String>,
    /// How a turn's typed output is asked for.
    pub structured_output: Option<String>,
    /// Present only to refuse it without echoing it.
    api_key: Option<toml::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryFile {
    pub max_retries: Option<u32>,
    pub initial_backoff_ms: Option<u64>,
    pub max_backoff_ms: Option<u64>,
    pub max_retry_after_secs: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsFile {
    pub connect_secs: Option<u64>,
    pub request_secs: Option<u64>,
    pub idle_secs: Option<u64>,
}

/// `[arbiter]`, `[orchestrator]`, `[subagent]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleFile {
    /// `provider:model`.
    pub model: Option<String>,
    /// The context budget in tokens.
    pub context_tokens: Option<u64>,
    /// The most output tokens asked for per reply.
    pub max_output_tokens: Option<u64>,
    pub schema_repairs: Option<u32>,
    pub max_retries: Option<u32>,
    /// Overrides the context window the API reports.
    pub context_window: Option<u64>,
    /// Overrides the output maximum the API reports.
    pub output_limit: Option<u64>,
    /// This role's server, above the provider's flag/variable and section.
    pub base_url: Option<String>,
    /// This role's key variable, instead of the provider's flag/variable and
    /// section (`""`: no key).
    pub api_key_env: Option<String>,
    /// This role's server kind, above the provider section's.
    pub server: Option<String>,
    /// This role's structured output mode, above the provider section's.
    pub structured_output: Option<String>,
    /// `full` (the default) or `small`: what the role asks of its model.
    pub profile: Option<String>,
    /// The sampling temperature (0 to 2); unset: the server's default.
    pub temperature: Option<f32>,
    api_key: Option<toml::Value>,
}

impl ConfigFile {
    /// Reads and checks a file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LlmError::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| LlmError::Config(format!("{}: {e}", path.display())))
    }

    pub fn parse(text: &str) -> Result<Self> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| LlmError::Config(e.to_string()))?;
        let sections = [
            ("anthropic", file.anthropic.api_key.is_some()),
            ("openai", file.openai.api_key.is_some()),
            ("arbiter", file.arbiter.api_key.is_some()),
            ("orchestrator", file.orchestrator.api_key.is_some()),
            ("subagent", file.subagent.api_key.is_some()),
        ];
        if let Some((section, _)) = sections.iter().find(|(_, has)| *has) {
            return Err(LlmError::Config(format!(
                "[{section}] api_key: keys are not read from the config file; \
                 name an environment variable with api_key_env instead"
            )));
        }
        Ok(file)
    }

    /// The built-in price table with this file's prices over it.
    pub fn price_table(&self) -> crate::price::PriceTable {
        crate::price::PriceTable::defaults().with(&self.prices)
    }

    fn role(&self, role: Role) -> &RoleFile {
        match role {
            Role::Arbiter => &self.arbiter,
            Role::Orchestrator => &self.orchestrator,
            Role::Subagent => &self.subagent,
        }
    }

    fn provider(&self, provider: Provider) -> &ProviderFile {
        match provider {
            Provider::Anthropic => &self.anthropic,
            Provider::OpenAi => &self.openai,
        }
    }
}

/// Provider settings given as flags or environment variables
/// (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`, `OPENAI_BASE_URL`, …).
#[derive(Debug, Clone, Default)]
pub struct ProviderOverrides {
    pub anthropic_base_url: Option<String>,
    pub anthropic_api_key: Option<ApiKey>,
    pub anthropic_version: Option<String>,
    pub openai_base_url: Option<String>,
    pub openai_api_key: Option<ApiKey>,
}

/// One role's settings given as flags or environment variables.
#[derive(Debug, Clone, Default)]
pub struct RoleOverrides {
    pub model: Option<String>,
    pub context_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub schema_repairs: Option<u32>,
    pub max_retries: Option<u32>,
}

/// One role's model, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleConfig {
    pub role: Role,
    pub model: ModelConfig,
    /// What the role's context percentage is measured against; may be lower
    /// than the model's window (see [`crate::context_budget`]).
    pub context_budget: u64,
    pub schema_repairs: u32,
}

/// Resolves `role` from the file and the overrides. `env` reads the
/// variables the file names in `api_key_env`.
///
/// Base URL: the role's `base_url` > the provider's flag or variable
/// (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`) > the provider section's
/// `base_url` > the provider's default. Key: if the role has `api_key_env`,
/// that variable only (`""`, or a variable that is unset, means no key);
/// else the provider's flag or variable (`ANTHROPIC_API_KEY`,
/// `OPENAI_API_KEY`) > the variable the provider section's `api_key_env`
/// names. The role's `base_url` and `api_key_env` apply only while the role's
/// model is on the provider of its `model` in the file (a model flag such as
/// `SUBAGENT_MODEL` that moves the role to the other provider drops them).
/// There are no per-role connection flags.
pub fn resolve(
    file: &ConfigFile,
    role: Role,
    providers: &ProviderOverrides,
    overrides: &RoleOverrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RoleConfig> {
    let section = file.role(role);
    let spec = overrides
        .model
        .as_deref()
        .or(section.model.as_deref())
        .unwrap_or(default_model(role));
    let mut model = ModelConfig::from_spec(spec).map_err(|e| {
        let detail = match e {
            LlmError::Config(detail) => detail,
            other => other.to_string(),
        };
        LlmError::Config(format!("the {role} model: {detail}"))
    })?;
    let provider = file.provider(model.provider);
    let (flag_url, flag_key) = match model.provider {
        Provider::Anthropic => (&providers.anthropic_base_url, &providers.anthropic_api_key),
        Provider::OpenAi => (&providers.openai_base_url, &providers.openai_api_key),
    };
    // The role's own server and key variable belong to the provider of the
    // role's model in the file: a flag that moves the role to the other
    // provider leaves them behind.
    let file_provider = parse_model_spec(section.model.as_deref().unwrap_or(default_model(role)))
        .ok()
        .map(|(provider, _)| provider);
    let (role_url, role_key_env) = if file_provider == Some(model.provider) {
        (section.base_url.as_ref(), section.api_key_env.as_ref())
    } else {
        (None, None)
    };
    // Role > provider flag/env > provider section > default.
    if let Some(url) = role_url
        .or(flag_url.as_ref())
        .or(provider.base_url.as_ref())
    {
        model.base_url = url.clone();
    }
    let from_env = |name: &str| {
        Some(name)
            .filter(|n| !n.is_empty())
            .and_then(env)
            .filter(|k| !k.is_empty())
            .map(ApiKey::new)
    };
    let flag_key = flag_key.clone().filter(|k| !k.expose().is_empty());
    // The provider's key belongs to the provider's URL: a role that sends its
    // requests elsewhere (its own base_url) gets no key unless it names one.
    let provider_url = flag_url
        .as_ref()
        .or(provider.base_url.as_ref())
        .cloned()
        .unwrap_or_else(|| ModelConfig::new(model.provider, "").base_url);
    let elsewhere =
        role_url.is_some_and(|url| url.trim_end_matches('/') != provider_url.trim_end_matches('/'));
    model.api_key = match role_key_env {
        // A role that names its own variable uses only that one ("" for no key).
        Some(name) => from_env(name),
        None if elsewhere => {
            let provider_key =
                flag_key.or_else(|| provider.api_key_env.as_deref().and_then(from_env));
            if provider_key.is_some() {
                tracing::warn!(
                    role = %role,
                    "[{role}] base_url is not the provider's: the provider's key is not sent there; \
                     set api_key_env in [{role}] to send one"
                );
            }
            None
        }
        None => flag_key.or_else(|| provider.api_key_env.as_deref().and_then(from_env)),
    };
    if let Some(version) = providers
        .anthropic_version
        .as_ref()
        .or(file.anthropic.version.as_ref())
    {
        model.anthropic_version = version.clone();
    }
    if let Some(field) = &file.openai.max_tokens_field {
        if !matches!(field.as_str(), "max_completion_tokens" | "max_tokens") {
            return Err(LlmError::Config(format!(
                "[openai] max_tokens_field must be max_completion_tokens or max_tokens, not {field:?}"
            )));
        }
        model.max_tokens_field = field.clone();
    }
    let setting = |key: &str, own: Option<&String>, shared: Option<&String>| match (own, shared) {
        (Some(value), _) => Some((format!("[{}] {key}", section_name(role)), value.clone())),
        (None, Some(value)) => Some((format!("[{}] {key}", model.provider), value.clone())),
        (None, None) => None,
    };
    let named = |e: LlmError, place: &str| match e {
        LlmError::Config(detail) => LlmError::Config(format!(
            "{place}: {}",
            detail
                .split_once(' ')
                .map_or(detail.as_str(), |(_, rest)| rest)
        )),
        other => other,
    };
    if let Some((place, value)) = setting(
        "structured_output",
        section.structured_output.as_ref(),
        provider.structured_output.as_ref(),
    ) {
        model.structured_output = value.parse().map_err(|e| named(e, &place))?;
    }
    if let Some(t) = section.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(LlmError::Config(format!(
                "[{}] temperature must be between 0 and 2, not {t}",
                section_name(role)
            )));
        }
        model.temperature = Some(t);
    }
    if let Some(profile) = &section.profile {
        model.profile = profile
            .parse()
            .map_err(|e| named(e, &format!("[{}] profile", section_name(role))))?;
    }
    if let Some((place, value)) =
        setting("server", section.server.as_ref(), provider.server.as_ref())
    {
        model.server = Some(value.parse().map_err(|e| named(e, &place))?);
    }
    model.max_output_tokens = overrides
        .max_output_tokens
        .or(section.max_output_tokens)
        .unwrap_or(default_max_output(role));
    model.limits = ModelLimits {
        context_window: section.context_window,
        max_output_tokens: section.output_limit,
    };
    model.retry = retry_policy(&file.retry);
    if let Some(n) = overrides.max_retries.or(section.max_retries) {
        model.retry.max_retries = n;
    }
    model.timeouts = timeouts(&file.timeouts);
    let context_budget = overrides
        .context_tokens
        .or(section.context_tokens)
        .unwrap_or(DEFAULT_CONTEXT_BUDGET);
    if context_budget == 0 || model.max_output_tokens == 0 {
        return Err(LlmError::Config(format!(
            "the {role}'s context budget and output tokens must be above zero"
        )));
    }
    Ok(RoleConfig {
        role,
        model,
        context_budget,
        schema_repairs: overrides
            .schema_repairs
            .or(section.schema_repairs)
            .unwrap_or(DEFAULT_SCHEMA_REPAIRS),
    })
}

/// The file section of a role.
fn section_name(role: Role) -> &'static str {
    match role {
        Role::Arbiter => "arbiter",
        Role::Orchestrator => "orchestrator",
        Role::Subagent => "subagent",
    }
}

fn retry_policy(file: &RetryFile) -> RetryPolicy {
    let d = RetryPolicy::default();
    RetryPolicy {
        max_retries: file.max_retries.unwrap_or(d.max_retries),
        initial_backoff: file
            .initial_backoff_ms
            .map_or(d.initial_backoff, Duration::from_millis),
        max_backoff: file
            .max_backoff_ms
            .map_or(d.max_backoff, Duration::from_millis),
        max_retry_after: file
            .max_retry_after_secs
            .map_or(d.max_retry_after, Duration::from_secs),
    }
}

fn timeouts(file: &TimeoutsFile) -> Timeouts {
    let d = Timeouts::default();
    Timeouts {
        connect: file.connect_secs.map_or(d.connect, Duration::from_secs),
        request: file.request_secs.map_or(d.request, Duration::from_secs),
        idle: file.idle_secs.map_or(d.idle, Duration::from_secs),
    }
}
