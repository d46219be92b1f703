//! What a worker checks and makes before it takes any summons: its settings,
//! the runtime's CLI, the tools' sandbox (run once) and the subagents' model.
//! A worker that cannot run Orchestrators here stops at start, saying why,
//! rather than failing each Orchestrator it would take.

use std::time::Duration;

use crate::sandbox::{self, Sandbox, SandboxMode};
use crate::subagent::SubagentRole;
use crate::{Config, Error, Result, Runtime, runtime};

/// Settings no worker can run with.
pub(crate) fn check(config: &Config) -> Result<()> {
    if !arbiter_protocol::subjects::is_valid_token(&config.pool) {
        return Err(Error::Config(format!(
            "pool name {:?} must be letters, digits, - or _",
            config.pool
        )));
    }
    if config.max_orchestrators == 0 {
        return Err(Error::Config(
            "--max-orchestrators must be at least 1".into(),
        ));
    }
    if config.lease < Duration::from_millis(300) {
        return Err(Error::Config(
            "--lease-secs must be at least 0.3 seconds".into(),
        ));
    }
    // A floor the runtime cannot hold its Orchestrators to would fail each
    // of them: the worker does not start.
    let floor = arbiter_protocol::Layers {
        floor: config.policy.clone(),
        ..Default::default()
    };
    if let Err(why) = runtime::policy::map(config.runtime, &floor) {
        return Err(Error::Config(format!(
            "--policy `{}`: {why}",
            config.policy
        )));
    }
    if config.subagent_max_calls == 0 {
        return Err(Error::Config(
            "--subagent-max-calls must be at least 1".into(),
        ));
    }
    std::fs::create_dir_all(&config.workspace_root).map_err(|e| {
        Error::Workspace(format!(
            "cannot create {}: {e}",
            config.workspace_root.display()
        ))
    })
}

/// The runtime's CLI, when it runs on one: there, and new enough.
pub(crate) async fn probe_runtime(config: &Config) -> Result<()> {
    match config.runtime {
        Runtime::ClaudeCode => {
            runtime::claude::check_allow_rules(&config.claude_code.allow)
                .map_err(Error::Runtime)?;
            let version = runtime::claude::probe(&config.claude_code.bin)
                .await
                .map_err(Error::Runtime)?;
            tracing::info!(cli = %config.claude_code.bin.display(), %version, "Orchestrators run on the Claude Code CLI");
        }
        Runtime::Codex => {
            let version = runtime::codex::probe(&config.codex.bin, &config.model)
                .await
                .map_err(Error::Runtime)?;
            tracing::info!(cli = %config.codex.bin.display(), %version, "Orchestrators run on the Codex CLI");
        }
        Runtime::Native => {}
    }
    Ok(())
}

/// Resolves the tools' sandbox and runs `true` through it once: a worker
/// whose sandbox does not work does not start.
pub(crate) async fn sandbox(config: &Config) -> Result<Sandbox> {
    let root = config.workspace_root.canonicalize().map_err(|e| {
        Error::Workspace(format!(
            "cannot resolve {}: {e}",
            config.workspace_root.display()
        ))
    })?;
    // Every file of the worker's NATS credential is hidden, however it was
    // given (a flag, the environment, a config): the list comes from the
    // settings the connection uses.
    let mut sandbox_config = config.sandbox.clone();
    let nats = &config.nats;
    sandbox_config.secret_files.extend(
        [&nats.creds, &nats.nkey, &nats.tls_key]
            .into_iter()
            .flatten()
            .filter(|path| !path.as_os_str().is_empty())
            .cloned(),
    );
    let sandbox = Sandbox::new(&sandbox_config, &root)?;
    match config.sandbox.mode {
        SandboxMode::None => {
            tracing::warn!(
                "--sandbox none: tools' commands run unconfined, as this worker's user; they can \
                 read its environment, its memory and its files (API keys included)"
            );
            match sandbox.containment() {
                Some(sandbox::Containment::ProcessGroup) | None => tracing::warn!(
                    "--sandbox none: no writable cgroup v2 and no PID namespace here; a timeout \
                     or cancel kills a command's process group only, so a process it started \
                     with setsid, nohup and disown, or a double fork survives it"
                ),
                Some(how) => tracing::info!(
                    "--sandbox none: tools' commands run in {how}; a timeout or cancel kills \
                     every process they started"
                ),
            }
        }
        SandboxMode::Bwrap => {
            sandbox.probe(&root).await?;
            for name in config
                .sandbox
                .env
                .iter()
                .filter(|n| sandbox::is_secret_env(n))
            {
                tracing::warn!(
                    name,
                    "--sandbox-env passes a variable that looks secret to every command"
                );
            }
            tracing::info!(
                network = !config.sandbox.unshare_net,
                "tools' commands run in a bwrap sandbox"
            );
        }
    }
    Ok(sandbox)
}

/// The subagents' role: their model (the Orchestrator's unless one is set)
/// and its context budget, lowered to the model's window.
pub(crate) async fn subagent_role(config: &Config) -> Result<SubagentRole> {
    let spec = config.subagent_model.as_ref().unwrap_or(&config.model);
    let model = arbiter_llm::client_for_role(spec, Some(arbiter_protocol::Role::Subagent))?;
    Ok(SubagentRole {
        context_budget: arbiter_llm::context_budget(model.as_ref(), config.subagent_context_budget)
            .await,
        model_name: spec.model.clone(),
        prices: config.prices.clone(),
        model,
        max_calls: config.subagent_max_calls,
    })
}
