//! The webhooks as configured: `[[hooks]]` tables of the config file and
//! one hook from the environment (`ARBITER_HOOK_URL`, `ARBITER_HOOK_SECRET`,
//! `ARBITER_HOOK_EVENTS`), checked once at start. A hook's secret is kept
//! in a [`Secret`], whose `Debug` says `<secret>`, and its URL is shown by
//! its origin only (a Slack or ntfy URL carries its token in the path).

use std::path::PathBuf;
use std::time::Duration;

use arbiter_protocol::NotificationKind;
use serde::Deserialize;

use crate::{Error, Result};

/// How long one POST may take before it counts as failed, unless the hook says.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// A hook's signing key. Never logged, never in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret as written: `whsec_<base64>` (the Standard Webhooks form)
    /// is the key those bytes decode to; anything else is its own bytes.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let text = text.trim();
        let bytes = match text.strip_prefix("whsec_") {
            Some(encoded) => data_encoding::BASE64
                .decode(encoded.as_bytes())
                .map_err(|_| "a secret starting whsec_ must be base64 after it".to_owned())?,
            None => text.as_bytes().to_vec(),
        };
        if bytes.is_empty() {
            return Err("the secret is empty".into());
        }
        Ok(Self(bytes))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}

/// What a hook's POST body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The event's JSON, as stored (docs/schemas/notification.json).
    Standard,
    /// `{"text": "<summary>"}`, what a Slack incoming webhook takes.
    Slack,
}

/// One webhook.
#[derive(Clone, PartialEq)]
pub struct Hook {
    /// Letters, digits, - or _: its durable is `hook-<name>`.
    pub name: String,
    pub url: reqwest::Url,
    pub secret: Secret,
    /// The event types it gets.
    pub events: Vec<NotificationKind>,
    pub format: Format,
    /// How long one POST may take.
    pub timeout: Duration,
}

impl Hook {
    /// A hook of every event type, in the standard format, with the default
    /// timeout; `url` must be http or https.
    pub fn new(name: &str, url: &str, secret: Secret) -> Result<Self> {
        if !arbiter_protocol::subjects::is_valid_token(name) {
            return Err(Error::Config(format!(
                "hook name {name:?} must be letters, digits, - or _"
            )));
        }
        let url = reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                Error::Config(format!(
                    "hook {name}: the url must be an http:// or https:// URL"
                ))
            })?;
        Ok(Self {
            name: name.to_owned(),
            url,
            secret,
            events: NotificationKind::ALL.to_vec(),
            format: Format::Standard,
            timeout: DEFAULT_HOOK_TIMEOUT,
        })
    }

    pub fn wants(&self, kind: NotificationKind) -> bool {
        self.events.contains(&kind)
    }

    /// The URL as logs may show it: scheme, host and port (its path and
    /// query may hold a token).
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }

    /// Plain http to another machine: the events (and their signatures)
    /// cross the network in the clear.
    pub fn is_plaintext_remote(&self) -> bool {
        if self.url.scheme() != "http" {
            return false;
        }
        let host = self.url.host_str().unwrap_or_default();
        let ip = host.trim_start_matches('[').trim_end_matches(']');
        match ip.parse::<std::net::IpAddr>() {
            Ok(ip) => !ip.is_loopback(),
            Err(_) => host != "localhost",
        }
    }
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("name", &self.name)
            .field("url", &self.origin())
            .field("secret", &self.secret)
            .field("events", &self.events)
            .field("format", &self.format)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// `[[hooks]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HookFile {
    name: String,
    url: String,
    secret: Option<String>,
    /// The environment variable that holds the secret.
    secret_env: Option<String>,
    /// A file that holds the secret (trailing newline ignored).
    secret_file: Option<PathBuf>,
    events: Option<Vec<String>>,
    format: Option<String>,
    timeout_secs: Option<u64>,
}

/// The one hook the environment (or flags) may give.
#[derive(Debug, Default)]
pub struct HookArgs {
    pub name: Option<String>,
    pub url: Option<String>,
    pub secret: Option<Secret>,
    /// Comma-separated event types; none: every type.
    pub events: Option<String>,
}

/// Every hook configured: the file's `[[hooks]]` tables, then the one of
/// `args`; `var` reads the environment (for `secret_env`).
pub fn hooks(
    tables: &[toml::Table],
    args: HookArgs,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Hook>> {
    let mut hooks = Vec::new();
    for table in tables {
        let file: HookFile = table
            .clone()
            .try_into()
            .map_err(|e| Error::Config(format!("[[hooks]]: {e}")))?;
        hooks.push(from_file(file, var)?);
    }
    match (args.url, args.secret) {
        (Some(url), Some(secret)) => {
            let name = args.name.unwrap_or_else(|| "env".to_owned());
            let mut hook = Hook::new(&name, &url, secret)?;
            if let Some(events) = args.events {
                let list: Vec<String> = events.split(',').map(|e| e.trim().to_owned()).collect();
                hook.events = kinds(&name, &list)?;
            }
            hooks.push(hook);
        }
        (Some(_), None) => {
            return Err(Error::Config(
                "ARBITER_HOOK_URL is set without ARBITER_HOOK_SECRET: a hook needs a secret".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::Config(
                "ARBITER_HOOK_SECRET is set without ARBITER_HOOK_URL".into(),
            ));
        }
        (None, None) => {}
    }
    for (i, hook) in hooks.iter().enumerate() {
        if hooks[..i].iter().any(|h| h.name == hook.name) {
            return Err(Error::Config(format!(
                "two hooks are named {:?}: each needs a name of its own",
                hook.name
            )));
        }
    }
    Ok(hooks)
}

fn from_file(file: HookFile, var: &dyn Fn(&str) -> Option<String>) -> Result<Hook> {
    let name = file.name;
    let bad = |what: String| Error::Config(format!("hook {name}: {what}"));
    let text = match (file.secret, file.secret_env, file.secret_file) {
        (Some(secret), None, None) => secret,
        (None, Some(env), None) => var(&env).ok_or_else(|| bad(format!("{env} is not set")))?,
        (None, None, Some(path)) => std::fs::read_to_string(&path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?,
        _ => {
            return Err(bad(
                "give exactly one of secret, secret_env and secret_file".into(),
            ));
        }
    };
    let secret = Secret::parse(&text).map_err(bad)?;
    let mut hook = Hook::new(&name, &file.url, secret)?;
    if let Some(events) = file.events {
        hook.events = kinds(&name, &events)?;
    }
    hook.format = match file.format.as_deref() {
        None | Some("standard") => Format::Standard,
        Some("slack") => Format::Slack,
        Some(other) => {
            return Err(bad(format!(
                "format {other:?} is not one of standard, slack"
            )));
        }
    };
    if let Some(secs) = file.timeout_secs {
        hook.timeout = Duration::from_secs(secs.max(1));
    }
    Ok(hook)
}

fn kinds(name: &str, list: &[String]) -> Result<Vec<NotificationKind>> {
    let mut out = Vec::new();
    for word in list.iter().filter(|w| !w.is_empty()) {
        let kind = NotificationKind::parse(word).ok_or_else(|| {
            let all: Vec<&str> = NotificationKind::ALL.iter().map(|k| k.as_str()).collect();
            Error::Config(format!(
                "hook {name}: event {word:?} is not one of {}",
                all.join(", ")
            ))
        })?;
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    if out.is_empty() {
        return Err(Error::Config(format!("hook {name}: events is empty")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Vec<toml::Table> {
        let doc: toml::Table = toml::from_str(text).unwrap();
        doc["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_table().unwrap().clone())
            .collect()
    }

    #[test]
    fn hooks_are_read_from_the_file_and_the_environment() {
        let tables = table(
            r#"
            [[hooks]]
            name = "phone"
            url = "https://ntfy.sh/my-topic?x=1"
            secret_env = "PHONE_SECRET"
            events = ["needs_input", "failed"]

            [[hooks]]
            name = "team"
            url = "https://hooks.slack.com/services/T0/B0/XYZ"
            secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
            format = "slack"
            timeout_secs = 3
            "#,
        );
        let var = |name: &str| (name == "PHONE_SECRET").then(|| "s3cret\n".to_owned());
        let args = HookArgs {
            url: Some("http://127.0.0.1:9000/hook".into()),
            secret: Some(Secret::parse("local").unwrap()),
            events: Some("completed, budget".into()),
            name: None,
        };
        let hooks = hooks(&tables, args, &var).unwrap();
        let summary: Vec<_> = hooks
            .iter()
            .map(|h| {
                (
                    h.name.as_str(),
                    h.events.len(),
                    h.format,
                    h.timeout.as_secs(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("phone", 2, Format::Standard, 10),
                ("team", 5, Format::Slack, 3),
                ("env", 2, Format::Standard, 10),
            ]
        );
        assert_eq!(hooks[0].secret.bytes(), b"s3cret");
        assert_eq!(hooks[1].secret.bytes().len(), 24);
        assert!(!hooks[2].is_plaintext_remote());
        // Neither the secret nor the URL's path or query shows.
        let shown = format!("{hooks:?}");
        for hidden in ["s3cret", "whsec", "XYZ", "my-topic", "x=1", "local"] {
            assert!(!shown.contains(hidden), "{hidden} in {shown}");
        }
        assert!(shown.contains("<secret>") && shown.contains("https://hooks.slack.com"));
    }

    #[test]
    fn a_bad_hook_is_refused_with_its_reason() {
        let var = |_: &str| None;
        let cases = [
            (
                "name = \"a b\"\nurl = \"https://x\"\nsecret = \"s\"",
                "must be letters",
            ),
            (
                "name = \"a\"\nurl = \"ftp://x\"\nsecret = \"s\"",
                "http:// or https://",
            ),
            ("name = \"a\"\nurl = \"https://x\"", "exactly one of"),
            (
                "name = \"a\"\nurl = \"https://x\"\nsecret_env = \"NOPE\"",
                "NOPE is not set",
            ),
            (
                "name = \"a\"\nurl = \"https://x\"\nsecret = \"s\"\nevents = [\"done\"]",
                "\"done\" is not one of needs_input",
            ),
            (
                "name = \"a\"\nurl = \"https://x\"\nsecret = \"whsec_!!\"",
                "base64",
            ),
            (
                "name = \"a\"\nurl = \"https://x\"\nsecret = \"s\"\nretries = 3",
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let tables = table(&format!("[[hooks]]\n{text}"));
            let got = hooks(&tables, HookArgs::default(), &var).unwrap_err();
            assert!(got.to_string().contains(want), "{text}: {got}");
        }
        let twice = table(
            "[[hooks]]\nname = \"a\"\nurl = \"https://x\"\nsecret = \"s\"\n\
             [[hooks]]\nname = \"a\"\nurl = \"https://y\"\nsecret = \"t\"",
        );
        assert!(hooks(&twice, HookArgs::default(), &var).is_err());
        let half = HookArgs {
            url: Some("https://x".into()),
            ..HookArgs::default()
        };
        assert!(hooks(&[], half, &var).is_err());
    }

    #[test]
    fn plain_http_is_told_apart_by_host() {
        let hook = |url: &str| Hook::new("h", url, Secret::parse("s").unwrap()).unwrap();
        assert!(!hook("http://localhost:8080/x").is_plaintext_remote());
        assert!(!hook("http://[::1]/x").is_plaintext_remote());
        assert!(!hook("https://example.com/x").is_plaintext_remote());
        assert!(hook("http://example.com/x").is_plaintext_remote());
        assert!(hook("http://10.0.0.5/x").is_plaintext_remote());
    }
}
