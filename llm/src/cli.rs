//! The command-line flags every binary shares for reaching model providers
//! (feature `cli`). Each flag also reads an environment variable; none has
//! a clap default, so that an unset flag falls through to the config file.

use std::path::PathBuf;

use crate::config::{ConfigFile, ProviderOverrides};
use crate::{ApiKey, Result};

#[derive(Debug, Clone, clap::Args)]
pub struct ProviderArgs {
    /// Model configuration file (TOML): models, budgets and providers per role.
    #[arg(long = "config", env = "ARBITER_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Base URL of the Anthropic API (a proxy or a mock can stand in).
    #[arg(long, env = "ANTHROPIC_BASE_URL")]
    pub anthropic_base_url: Option<String>,
    /// Anthropic API key (never logged).
    #[arg(long, env = "ANTHROPIC_API_KEY", hide_env_values = true)]
    pub anthropic_api_key: Option<ApiKey>,
    /// The anthropic-version header.
    #[arg(long, env = "ANTHROPIC_VERSION")]
    pub anthropic_version: Option<String>,
    /// Base URL of an OpenAI-compatible server (OpenAI, Ollama, vLLM, llama.cpp, OpenRouter).
    #[arg(long, env = "OPENAI_BASE_URL")]
    pub openai_base_url: Option<String>,
    /// API key of the OpenAI-compatible server, if it needs one (never logged).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<ApiKey>,
}

impl ProviderArgs {
    /// The config file named by `--config`, or an empty one.
    pub fn load_file(&self) -> Result<ConfigFile> {
        match &self.config {
            Some(path) => ConfigFile::load(path),
            None => Ok(ConfigFile::default()),
        }
    }

    pub fn overrides(&self) -> ProviderOverrides {
        ProviderOverrides {
            anthropic_base_url: self.anthropic_base_url.clone(),
            anthropic_api_key: self.anthropic_api_key.clone(),
            anthropic_version: self.anthropic_version.clone(),
            openai_base_url: self.openai_base_url.clone(),
            openai_api_key: self.openai_api_key.clone(),
        }
    }
}
