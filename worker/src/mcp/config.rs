//! `[mcp_servers.<name>]` of the config file, read and checked. Values that
//! are secret (a bearer token, a header's value, a variable a server needs)
//! are never in the file: it names the environment variables that hold them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// How long a server has to start, answer `initialize` and list its tools, by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one tool call may take, by default.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
use arbiter_protocol::orchestrator::MAX_MCP_SERVER_NAME as MAX_SERVER_NAME;

/// One MCP server, as the worker's config declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Its name: the `<server>` of its tools' `mcp__<server>__<tool>`, and
    /// what a summons's `needs` names.
    pub name: String,
    pub transport: Transport,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A command run over stdio in the worker's sandbox, in the session's
    /// workspace; `{workspace}` in an argument is the workspace's path.
    /// `env` names the worker's variables passed to it (nothing else of
    /// the worker's environment is).
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<String>,
    },
    /// Streamable HTTP: `Authorization: Bearer` from the variable
    /// `bearer_token_env`, other headers from the variables `headers_env`
    /// names (header → variable).
    Http {
        url: String,
        bearer_token_env: Option<String>,
        headers_env: BTreeMap<String, String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerFile {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    url: Option<String>,
    bearer_token_env: Option<String>,
    #[serde(default)]
    headers_env: BTreeMap<String, String>,
    startup_timeout_secs: Option<f64>,
    tool_timeout_secs: Option<f64>,
    /// Present only to refuse it without echoing it.
    headers: Option<toml::Value>,
    bearer_token: Option<toml::Value>,
}

/// Reads `[mcp_servers.<name>]` tables (as the config file holds them).
pub fn parse_servers(tables: &BTreeMap<String, toml::Table>) -> Result<Vec<ServerConfig>, String> {
    tables
        .iter()
        .map(|(name, table)| {
            parse_one(name, table).map_err(|e| format!("[mcp_servers.{name}]: {e}"))
        })
        .collect()
}

fn parse_one(name: &str, table: &toml::Table) -> Result<ServerConfig, String> {
    if !arbiter_protocol::orchestrator::mcp_server_name_ok(name) {
        return Err(format!(
            "a server's name is 1 to {MAX_SERVER_NAME} letters, digits, - or _ (and no \"__\")"
        ));
    }
    let file: ServerFile = table
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_owned())?;
    if file.headers.is_some() || file.bearer_token.is_some() {
        return Err(
            "secrets are not read from the config file: name the environment variables that \
             hold them with headers_env and bearer_token_env"
                .to_owned(),
        );
    }
    let timeout = |secs: Option<f64>, default: Duration, key: &str| match secs {
        None => Ok(default),
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("{key} is a positive number of seconds")),
    };
    let transport = match (file.command, file.url) {
        (Some(command), None) => {
            if !file.headers_env.is_empty() || file.bearer_token_env.is_some() {
                return Err("headers_env and bearer_token_env are for a url".to_owned());
            }
            if command.trim().is_empty() {
                return Err("command is empty".to_owned());
            }
            Transport::Stdio {
                command,
                args: file.args,
                env: file.env,
            }
        }
        (None, Some(url)) => {
            if !file.args.is_empty() || !file.env.is_empty() {
                return Err("args and env are for a command".to_owned());
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("{url:?} is not an http:// or https:// address"));
            }
            Transport::Http {
                url,
                bearer_token_env: file.bearer_token_env,
                headers_env: file.headers_env,
            }
        }
        (Some(_), Some(_)) => return Err("give a command or a url, not both".to_owned()),
        (None, None) => return Err("give a command (stdio) or a url (streamable HTTP)".to_owned()),
    };
    Ok(ServerConfig {
        name: name.to_owned(),
        transport,
        startup_timeout: timeout(
            file.startup_timeout_secs,
            DEFAULT_STARTUP_TIMEOUT,
            "startup_timeout_secs",
        )?,
        tool_timeout: timeout(
            file.tool_timeout_secs,
            DEFAULT_TOOL_TIMEOUT,
            "tool_timeout_secs",
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<ServerConfig>, String> {
        #[derive(Deserialize)]
        struct File {
            mcp_servers: BTreeMap<String, toml::Table>,
        }
        let file: File = toml::from_str(text).unwrap();
        parse_servers(&file.mcp_servers)
    }

    #[test]
    fn servers_are_read_and_checked() {
        let servers = parse(
            r#"
            [mcp_servers.git]
            command = "mcp-server-git"
            args = ["--repository", "{workspace}"]
            env = ["GIT_AUTHOR_NAME"]
            [mcp_servers.tracker]
            url = "https://tracker.example/mcp"
            bearer_token_env = "TRACKER_TOKEN"
            headers_env = { "X-Team" = "TRACKER_TEAM" }
            tool_timeout_secs = 5
            "#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "git");
        assert_eq!(servers[0].startup_timeout, DEFAULT_STARTUP_TIMEOUT);
        assert!(
            matches!(&servers[0].transport, Transport::Stdio { args, .. } if args[1] == "{workspace}")
        );
        assert_eq!(servers[1].tool_timeout, Duration::from_secs(5));
        assert!(
            matches!(&servers[1].transport, Transport::Http { bearer_token_env: Some(v), .. } if v == "TRACKER_TOKEN")
        );

        // What the user sees for each mistake: the table and what to do.
        let cases = [
            ("[mcp_servers.\"a__b\"]\ncommand = \"x\"", "no \"__\""),
            (
                "[mcp_servers.a]\nargs = []",
                "give a command (stdio) or a url",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h\"",
                "not both",
            ),
            ("[mcp_servers.a]\nurl = \"ftp://h\"", "not an http"),
            (
                "[mcp_servers.a]\nurl = \"http://h\"\nheaders = { A = \"s3cret\" }",
                "name the environment variables",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_secs = 0",
                "positive number",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ncomand = \"y\"",
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.starts_with("[mcp_servers."), "{error}");
            assert!(error.contains(want), "{text}: {error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }
}
