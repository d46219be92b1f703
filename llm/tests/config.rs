//! Model configuration per role: the file format, defaults, and the order
//! flag/env > file > default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use arbiter_llm::config::{self, ConfigFile, ProviderOverrides, RoleOverrides};
use arbiter_llm::{ApiKey, ModelLimits, Provider};
use arbiter_protocol::Role;
use pretty_assertions::assert_eq;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn defaults_without_a_file() {
    let file = ConfigFile::default();
    let resolve = |role| {
        config::resolve(
            &file,
            role,
            &ProviderOverrides::default(),
            &RoleOverrides::default(),
            &no_env,
        )
        .unwrap()
    };
    let arbiter = resolve(Role::Arbiter);
    assert_eq!(arbiter.model.spec(), "anthropic:claude-haiku-5-5");
    assert_eq!(arbiter.model.base_url, "https://api.anthropic.com");
    assert_eq!(arbiter.model.anthropic_version, "2023-06-01");
    assert_eq!(arbiter.model.max_output_tokens, 8_000);
    assert_eq!(arbiter.model.api_key, None);
    assert_eq!(arbiter.context_budget, 200_000);
    assert_eq!(arbiter.schema_repairs, 2);
    assert_eq!(
        resolve(Role::Orchestrator).model.spec(),
        "anthropic:claude-opus-5-5"
    );
    assert_eq!(
        resolve(Role::Subagent).model.spec(),
        "anthropic:claude-sonnet-5-5"
    );
}

#[test]
fn the_example_file_parses_and_resolves() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/arbiter.example.toml"
    );
    let file = ConfigFile::load(std::path::Path::new(path)).unwrap();
    let env = |name: &str| (name == "OPENROUTER_API_KEY").then(|| "or-key".to_owned());
    let sub = config::resolve(
        &file,
        Role::Subagent,
        &ProviderOverrides::default(),
        &RoleOverrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(sub.model.provider, Provider::OpenAi);
    assert_eq!(sub.model.model, "qwen2.5-coder:32b");
    assert_eq!(sub.model.base_url, "http://localhost:11434/v1");
    assert_eq!(sub.model.api_key, None);
    assert_eq!(sub.model.limits.context_window, Some(32_768));
    let orch = config::resolve(
        &file,
        Role::Orchestrator,
        &ProviderOverrides::default(),
        &RoleOverrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(orch.model.spec(), "anthropic:claude-opus-5-5");
    assert_eq!(orch.context_budget, 400_000);
}

const FILE: &str = r#"
[anthropic]
base_url = "https://proxy.example/anthropic"
version = "2026-10-21"
api_key_env = "MY_ANTHROPIC_KEY"

[openai]
base_url = "http://localhost:8000/v1"
max_tokens_field = "max_tokens"

[retry]
max_retries = 5
initial_backoff_ms = 250
max_backoff_ms = 4000

[timeouts]
idle_secs = 90

[arbiter]
model = "openai:llama3.3"
context_tokens = 64000
schema_repairs = 4
context_window = 128000
output_limit = 4096
base_url = "http://gpu-box:8000/v1"
api_key_env = "GPU_BOX_KEY"

[orchestrator]
model = "anthropic:claude-sonnet-5-5"
max_output_tokens = 20000
max_retries = 9
"#;

#[test]
fn the_file_is_read_and_env_and_flags_win_over_it() {
    let file = ConfigFile::parse(FILE).unwrap();
    let env = |name: &str| match name {
        "MY_ANTHROPIC_KEY" => Some("from-file-env".to_owned()),
        "GPU_BOX_KEY" => Some("gpu-key".to_owned()),
        _ => None,
    };
    let arbiter = config::resolve(
        &file,
        Role::Arbiter,
        &ProviderOverrides::default(),
        &RoleOverrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(arbiter.model.spec(), "openai:llama3.3");
    assert_eq!(arbiter.model.base_url, "http://gpu-box:8000/v1");
    assert_eq!(arbiter.model.api_key, Some(ApiKey::new("gpu-key")));
    assert_eq!(arbiter.model.max_tokens_field, "max_tokens");
    assert_eq!(
        arbiter.model.limits,
        ModelLimits {
            context_window: Some(128_000),
            max_output_tokens: Some(4096)
        }
    );
    assert_eq!(arbiter.context_budget, 64_000);
    assert_eq!(arbiter.schema_repairs, 4);
    assert_eq!(arbiter.model.retry.max_retries, 5);
    assert_eq!(
        arbiter.model.retry.initial_backoff,
        Duration::from_millis(250)
    );
    assert_eq!(arbiter.model.timeouts.idle, Duration::from_secs(90));

    let orch = config::resolve(
        &file,
        Role::Orchestrator,
        &ProviderOverrides::default(),
        &RoleOverrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(orch.model.base_url, "https://proxy.example/anthropic");
    assert_eq!(orch.model.anthropic_version, "2026-10-21");
    assert_eq!(orch.model.api_key, Some(ApiKey::new("from-file-env")));
    assert_eq!(orch.model.max_output_tokens, 20_000);
    assert_eq!(orch.model.retry.max_retries, 9);

    // Flags and their environment variables come first.
    let flags = ProviderOverrides {
        anthropic_base_url: Some("http://mock".into()),
        anthropic_api_key: Some(ApiKey::new("flag-key")),
        anthropic_version: Some("2023-06-01".into()),
        ..Default::default()
    };
    let role_flags = RoleOverrides {
        model: Some("anthropic:claude-haiku-5-5".into()),
        context_tokens: Some(50_000),
        max_output_tokens: Some(1_000),
        schema_repairs: Some(0),
        max_retries: Some(1),
    };
    let arbiter = config::resolve(&file, Role::Arbiter, &flags, &role_flags, &env).unwrap();
    assert_eq!(arbiter.model.spec(), "anthropic:claude-haiku-5-5");
    assert_eq!(arbiter.model.base_url, "http://mock");
    assert_eq!(arbiter.model.api_key, Some(ApiKey::new("flag-key")));
    assert_eq!(arbiter.model.anthropic_version, "2023-06-01");
    assert_eq!(arbiter.context_budget, 50_000);
    assert_eq!(arbiter.model.max_output_tokens, 1_000);
    assert_eq!(arbiter.schema_repairs, 0);
    assert_eq!(arbiter.model.retry.max_retries, 1);
}

#[test]
fn mistakes_in_the_file_are_plain_errors() {
    let unknown = ConfigFile::parse("[arbiter]\nmodle = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("unknown field `modle`"), "{unknown}");
    let section = ConfigFile::parse("[arbitre]\n").unwrap_err().to_string();
    assert!(section.contains("unknown field `arbitre`"), "{section}");
    let key = ConfigFile::parse("[openai]\napi_key = \"sk-in-the-file-123\"\n")
        .unwrap_err()
        .to_string();
    assert!(key.contains("api_key_env"), "{key}");
    assert!(!key.contains("sk-in-the-file-123"), "{key}");
    let file = ConfigFile::parse("[subagent]\nmodel = \"gemini:pro\"\n").unwrap();
    let err = config::resolve(
        &file,
        Role::Subagent,
        &ProviderOverrides::default(),
        &RoleOverrides::default(),
        &no_env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(
            "model configuration: the subagent model: provider \"gemini\" is not supported"
        ),
        "{err}"
    );
    let missing = ConfigFile::load(std::path::Path::new("/nonexistent/arbiter.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("cannot read /nonexistent/arbiter.toml"),
        "{missing}"
    );
}

/// The providers' environment variables (or flags) of a shell that has both
/// providers set up globally.
fn global_env() -> ProviderOverrides {
    ProviderOverrides {
        anthropic_base_url: Some("https://anthropic-proxy.example".into()),
        anthropic_api_key: Some(ApiKey::new("global-anthropic-key")),
        anthropic_version: None,
        openai_base_url: Some("https://api.openai.com/v1".into()),
        openai_api_key: Some(ApiKey::new("sk-global-openai-key")),
    }
}

#[test]
fn a_role_pointed_at_a_local_server_gets_no_global_key() {
    // The example file's subagent: a local Ollama, `api_key_env = ""`.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/arbiter.example.toml"
    );
    let file = ConfigFile::load(std::path::Path::new(path)).unwrap();
    let env = |name: &str| match name {
        "OPENAI_API_KEY" => Some("sk-global-openai-key".to_owned()),
        "OPENROUTER_API_KEY" => Some("or-key".to_owned()),
        _ => None,
    };
    let sub = config::resolve(
        &file,
        Role::Subagent,
        &global_env(),
        &RoleOverrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(sub.model.base_url, "http://localhost:11434/v1");
    assert_eq!(sub.model.api_key, None);

    // The same with a minimal file.
    let file = ConfigFile::parse(
        "[subagent]\nmodel = \"openai:llama3\"\nbase_url = \"http://ollama:11434\"\napi_key_env = \"\"\n",
    )
    .unwrap();
    let sub = config::resolve(
        &file,
        Role::Subagent,
        &global_env(),
        &RoleOverrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(sub.model.base_url, "http://ollama:11434");
    assert_eq!(sub.model.api_key, None);
}

#[test]
fn a_roles_own_key_variable_and_url_win_over_the_providers() {
    let file = ConfigFile::parse(
        r#"
[openai]
base_url = "https://file.example/v1"
api_key_env = "FILE_OPENAI_KEY"

[arbiter]
model = "openai:gpt-x"
api_key_env = "ARBITER_KEY"

[orchestrator]
model = "openai:gpt-x"
base_url = "http://gpu-box:8000/v1"

[subagent]
model = "openai:gpt-x"
api_key_env = "UNSET_KEY"
"#,
    )
    .unwrap();
    let env = |name: &str| match name {
        "ARBITER_KEY" => Some("arbiter-key".to_owned()),
        "FILE_OPENAI_KEY" => Some("file-key".to_owned()),
        _ => None,
    };
    let resolve = |role| {
        config::resolve(&file, role, &global_env(), &RoleOverrides::default(), &env)
            .unwrap()
            .model
    };
    // The role's own key variable wins over OPENAI_API_KEY; the URL is the
    // provider's, and OPENAI_BASE_URL wins over [openai] base_url.
    let arbiter = resolve(Role::Arbiter);
    assert_eq!(arbiter.api_key, Some(ApiKey::new("arbiter-key")));
    assert_eq!(arbiter.base_url, "https://api.openai.com/v1");
    // The role's own URL wins over OPENAI_BASE_URL; with no key variable of
    // its own, it gets no key: the provider's key (OPENAI_API_KEY) goes only
    // to the provider's URL, never to a server a config file names.
    let orch = resolve(Role::Orchestrator);
    assert_eq!(orch.base_url, "http://gpu-box:8000/v1");
    assert_eq!(orch.api_key, None);
    // A role that names a variable that is unset has no key: the global one
    // is not a fallback.
    let sub = resolve(Role::Subagent);
    assert_eq!(sub.api_key, None);
}

#[test]
fn the_providers_env_and_flags_win_over_the_providers_file_section() {
    let file = ConfigFile::parse(
        r#"
[anthropic]
base_url = "https://file.example/anthropic"
api_key_env = "FILE_ANTHROPIC_KEY"

[openai]
base_url = "https://file.example/v1"
api_key_env = "FILE_OPENAI_KEY"

[subagent]
model = "openai:gpt-x"
"#,
    )
    .unwrap();
    let env = |name: &str| match name {
        "FILE_ANTHROPIC_KEY" => Some("file-anthropic-key".to_owned()),
        "FILE_OPENAI_KEY" => Some("file-openai-key".to_owned()),
        _ => None,
    };
    let resolve = |role, providers: &ProviderOverrides| {
        config::resolve(&file, role, providers, &RoleOverrides::default(), &env)
            .unwrap()
            .model
    };
    let orch = resolve(Role::Orchestrator, &global_env());
    assert_eq!(orch.base_url, "https://anthropic-proxy.example");
    assert_eq!(orch.api_key, Some(ApiKey::new("global-anthropic-key")));
    let sub = resolve(Role::Subagent, &global_env());
    assert_eq!(sub.base_url, "https://api.openai.com/v1");
    assert_eq!(sub.api_key, Some(ApiKey::new("sk-global-openai-key")));
    // Without them, the file's provider sections apply.
    let orch = resolve(Role::Orchestrator, &ProviderOverrides::default());
    assert_eq!(orch.base_url, "https://file.example/anthropic");
    assert_eq!(orch.api_key, Some(ApiKey::new("file-anthropic-key")));
    let sub = resolve(Role::Subagent, &ProviderOverrides::default());
    assert_eq!(sub.base_url, "https://file.example/v1");
    assert_eq!(sub.api_key, Some(ApiKey::new("file-openai-key")));
}

#[test]
fn a_roles_connection_settings_stay_with_its_files_provider() {
    // The role's own server is an OpenAI-compatible one; a flag that moves
    // the role to Anthropic must not send Anthropic calls (or keys) there.
    let file = ConfigFile::parse(
        "[subagent]\nmodel = \"openai:llama3\"\nbase_url = \"http://ollama:11434\"\napi_key_env = \"\"\n",
    )
    .unwrap();
    let moved = RoleOverrides {
        model: Some("anthropic:claude-haiku-5-5".into()),
        ..Default::default()
    };
    let sub = config::resolve(&file, Role::Subagent, &global_env(), &moved, &no_env).unwrap();
    assert_eq!(sub.model.base_url, "https://anthropic-proxy.example");
    assert_eq!(sub.model.api_key, Some(ApiKey::new("global-anthropic-key")));
    // Another model on the same provider keeps the role's server.
    let renamed = RoleOverrides {
        model: Some("openai:qwen3".into()),
        ..Default::default()
    };
    let sub = config::resolve(&file, Role::Subagent, &global_env(), &renamed, &no_env).unwrap();
    assert_eq!(sub.model.base_url, "http://ollama:11434");
    assert_eq!(sub.model.api_key, None);
}

#[test]
fn the_providers_key_goes_only_to_the_providers_url() {
    // A role pointed at another server gets no key unless it names one; a
    // role whose base_url is the provider's own keeps the provider's key.
    let file = ConfigFile::parse(
        r#"
[orchestrator]
model = "anthropic:claude-opus-5-5"
base_url = "https://collector.example"

[subagent]
model = "anthropic:claude-sonnet-5-5"
base_url = "https://api.anthropic.com/"

[arbiter]
model = "anthropic:claude-haiku-5-5"
base_url = "https://collector.example"
api_key_env = "COLLECTOR_KEY"
"#,
    )
    .unwrap();
    let providers = ProviderOverrides {
        anthropic_api_key: Some(ApiKey::new("sk-ant-real")),
        ..Default::default()
    };
    let env = |name: &str| (name == "COLLECTOR_KEY").then(|| "collector-key".to_owned());
    let resolve = |role| {
        config::resolve(&file, role, &providers, &RoleOverrides::default(), &env)
            .unwrap()
            .model
    };
    let orch = resolve(Role::Orchestrator);
    assert_eq!(
        (orch.base_url.as_str(), orch.api_key),
        ("https://collector.example", None)
    );
    assert_eq!(
        resolve(Role::Subagent).api_key,
        Some(ApiKey::new("sk-ant-real"))
    );
    assert_eq!(
        resolve(Role::Arbiter).api_key,
        Some(ApiKey::new("collector-key"))
    );
}

#[test]
fn structured_output_and_server_resolve_per_role_and_bad_values_are_named() {
    use arbiter_llm::{OutputMode, Server, StructuredOutput};
    let text = r#"
[openai]
base_url = "http://127.0.0.1:8080/v1"
server = "llama.cpp"

[orchestrator]
model = "openai:qwen"

[subagent]
model = "openai:qwen"
structured_output = "prompt"

[arbiter]
model = "openai:qwen"
base_url = "https://api.openai.com/v1"
server = "openai"
"#;
    let file = ConfigFile::parse(text).unwrap();
    let resolve = |role| {
        config::resolve(
            &file,
            role,
            &ProviderOverrides::default(),
            &RoleOverrides::default(),
            &no_env,
        )
        .unwrap()
        .model
    };
    let orch = resolve(Role::Orchestrator);
    assert_eq!(orch.structured_output, StructuredOutput::Auto);
    assert_eq!(orch.server(), Server::LlamaCpp);
    assert_eq!(orch.output_mode(true), OutputMode::Tool);
    assert_eq!(orch.output_mode(false), OutputMode::ResponseFormat);
    let sub = resolve(Role::Subagent);
    assert_eq!(sub.output_mode(true), OutputMode::Prompt);
    let arbiter = resolve(Role::Arbiter);
    assert_eq!(arbiter.server(), Server::OpenAi);
    assert_eq!(arbiter.output_mode(true), OutputMode::ResponseFormat);
    // Nothing configured: the server is told by its URL.
    let plain = config::resolve(
        &ConfigFile::parse("[orchestrator]\nmodel = \"openai:qwen\"\n").unwrap(),
        Role::Orchestrator,
        &ProviderOverrides::default(),
        &RoleOverrides::default(),
        &no_env,
    )
    .unwrap()
    .model;
    assert_eq!(plain.server(), Server::OpenAi);
    assert_eq!(plain.output_mode(true), OutputMode::ResponseFormat);

    // profile = "small": auto is the union mode on a local server (not on
    // OpenAI's), and the temperature sent is 0 unless one is set.
    let small = |text: &str| {
        config::resolve(
            &ConfigFile::parse(text).unwrap(),
            Role::Orchestrator,
            &ProviderOverrides::default(),
            &RoleOverrides::default(),
            &no_env,
        )
        .unwrap()
        .model
    };
    let local = small(
        "[orchestrator]\nmodel = \"openai:q\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nserver = \"llama.cpp\"\nprofile = \"small\"\n",
    );
    assert_eq!(local.profile, arbiter_llm::Profile::Small);
    assert_eq!(local.output_mode(true), OutputMode::Union);
    assert_eq!(local.output_mode(false), OutputMode::ResponseFormat);
    assert_eq!(local.sampling_temperature(), Some(0.0));
    let openai =
        small("[orchestrator]\nmodel = \"openai:gpt\"\nprofile = \"small\"\ntemperature = 0.7\n");
    assert_eq!(openai.output_mode(true), OutputMode::ResponseFormat);
    assert_eq!(openai.sampling_temperature(), Some(0.7));
    assert_eq!(plain.sampling_temperature(), None);

    for (text, expected) in [
        (
            "[orchestrator]\nstructured_output = \"json\"\n",
            "[orchestrator] structured_output: must be \"auto\", \"response_format\", \"tool\", \"prompt\" or \"union\", not \"json\"",
        ),
        (
            "[arbiter]\nprofile = \"tiny\"\n",
            "[arbiter] profile: must be \"full\" or \"small\", not \"tiny\"",
        ),
        (
            "[orchestrator]\ntemperature = 3.5\n",
            "[orchestrator] temperature must be between 0 and 2, not 3.5",
        ),
        (
            "[openai]\nserver = \"tgi\"\n[arbiter]\nmodel = \"openai:x\"\n",
            "[openai] server: must be \"openai\", \"anthropic\", \"llama.cpp\", \"vllm\", \"ollama\", \"lmstudio\" or \"other\", not \"tgi\"",
        ),
    ] {
        let file = ConfigFile::parse(text).unwrap();
        let err = [Role::Arbiter, Role::Orchestrator]
            .into_iter()
            .find_map(|role| {
                config::resolve(
                    &file,
                    role,
                    &ProviderOverrides::default(),
                    &RoleOverrides::default(),
                    &no_env,
                )
                .err()
            })
            .unwrap()
            .to_string();
        assert!(err.contains(expected), "{err}");
    }
}
