//! The errors of model calls. Kinds a caller branches on are variants; every
//! provider's HTTP and stream errors map onto them here.

use std::time::Duration;

use arbiter_protocol::{ModelErrorKind, Role, WireError};
use serde_json::Value;

pub type Result<T, E = LlmError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("rate limited: {message}")]
    RateLimited {
        /// The delay the server asked for, if it named one.
        retry_after: Option<Duration>,
        message: String,
    },
    #[error("the model is overloaded: {message}")]
    Overloaded { message: String },
    #[error("authentication failed: {message} (is the API key right?)")]
    Authentication { message: String },
    #[error("permission denied: {message}")]
    PermissionDenied { message: String },
    #[error("spend limit or billing problem: {message} (retrying will not help)")]
    SpendLimit { message: String },
    #[error("the request was too large for the model's context: {message}")]
    ContextExceeded { message: String },
    #[error("invalid request: {message}")]
    InvalidRequest { message: String },
    #[error("API error (HTTP {status}): {message}")]
    Api {
        status: u16,
        message: String,
        retryable: bool,
    },
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("network error: {0}")]
    Network(String),
    #[error("stream error: {0}")]
    Stream(String),
    #[error("the reply did not match its schema after {attempts} attempts: {detail}")]
    SchemaViolation { attempts: u32, detail: String },
    #[error("model configuration: {0}")]
    Config(String),
}

impl LlmError {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::RateLimited { .. }
            | LlmError::Overloaded { .. }
            | LlmError::Timeout(_)
            | LlmError::Network(_)
            | LlmError::Stream(_) => true,
            LlmError::Api { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// Failures that no server hint may turn into a retry: sending the same
    /// request again cannot succeed, or would spend money for nothing.
    pub(crate) fn never_retry(&self) -> bool {
        match self {
            LlmError::Authentication { .. }
            | LlmError::PermissionDenied { .. }
            | LlmError::SpendLimit { .. }
            | LlmError::ContextExceeded { .. }
            | LlmError::InvalidRequest { .. }
            | LlmError::SchemaViolation { .. }
            | LlmError::Config(_) => true,
            LlmError::Api { status, .. } => matches!(status, 400 | 401 | 402 | 403 | 413),
            _ => false,
        }
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn kind(&self) -> ModelErrorKind {
        match self {
            LlmError::RateLimited { .. } => ModelErrorKind::RateLimited,
            LlmError::Overloaded { .. } => ModelErrorKind::Overloaded,
            LlmError::Authentication { .. } => ModelErrorKind::Authentication,
            LlmError::PermissionDenied { .. } => ModelErrorKind::PermissionDenied,
            LlmError::ContextExceeded { .. } => ModelErrorKind::ContextExceeded,
            LlmError::InvalidRequest { .. } | LlmError::Config(_) => ModelErrorKind::InvalidRequest,
            LlmError::Api { .. } => ModelErrorKind::Api,
            LlmError::Timeout(_) => ModelErrorKind::Timeout,
            LlmError::Network(_) => ModelErrorKind::Network,
            LlmError::Stream(_) => ModelErrorKind::Stream,
            LlmError::SpendLimit { .. } | LlmError::SchemaViolation { .. } => ModelErrorKind::Other,
        }
    }

    /// The error as the conversation log carries it.
    pub fn to_wire(&self, role: Role) -> WireError {
        match self {
            LlmError::SchemaViolation { attempts, detail } => WireError::SchemaViolation {
                role,
                attempts: *attempts,
                detail: detail.clone(),
            },
            other => WireError::Model {
                role,
                class: other.kind(),
                message: other.to_string(),
            },
        }
    }

    /// Replaces every occurrence of `secret` in the error's text (a server
    /// may echo a key back in its message).
    pub(crate) fn scrub(self, secret: Option<&str>) -> Self {
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            return self;
        };
        let clean = |s: String| s.replace(secret, "<redacted>");
        match self {
            LlmError::RateLimited {
                retry_after,
                message,
            } => LlmError::RateLimited {
                retry_after,
                message: clean(message),
            },
            LlmError::Overloaded { message } => LlmError::Overloaded {
                message: clean(message),
            },
            LlmError::Authentication { message } => LlmError::Authentication {
                message: clean(message),
            },
            LlmError::PermissionDenied { message } => LlmError::PermissionDenied {
                message: clean(message),
            },
            LlmError::SpendLimit { message } => LlmError::SpendLimit {
                message: clean(message),
            },
            LlmError::ContextExceeded { message } => LlmError::ContextExceeded {
                message: clean(message),
            },
            LlmError::InvalidRequest { message } => LlmError::InvalidRequest {
                message: clean(message),
            },
            LlmError::Api {
                status,
                message,
                retryable,
            } => LlmError::Api {
                status,
                message: clean(message),
                retryable,
            },
            LlmError::Timeout(m) => LlmError::Timeout(clean(m)),
            LlmError::Network(m) => LlmError::Network(clean(m)),
            LlmError::Stream(m) => LlmError::Stream(clean(m)),
            LlmError::SchemaViolation { attempts, detail } => LlmError::SchemaViolation {
                attempts,
                detail: clean(detail),
            },
            LlmError::Config(m) => LlmError::Config(clean(m)),
        }
    }
}

/// Maps an error body to a typed error. `status` is `None` for an error that
/// arrived inside a 200 stream. Both providers' bodies have the shape
/// `{"error": {"type", "message", "code"?}}` (OpenAI-compatible servers
/// sometimes send a bare string or `{"detail": ..}` instead).
pub(crate) fn error_from_body(
    status: Option<u16>,
    body: &Value,
    retry_after: Option<Duration>,
) -> LlmError {
    let error = body.get("error").unwrap_or(&Value::Null);
    let kind = error
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let code = match error.get("code") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let message = [
        error.as_str(),
        error.get("message").and_then(Value::as_str),
        body.get("message").and_then(Value::as_str),
        body.get("detail").and_then(Value::as_str),
    ]
    .into_iter()
    .flatten()
    .find(|m| !m.is_empty())
    .map(str::to_owned)
    .unwrap_or_else(|| match status {
        Some(s) => format!("HTTP {s} with no error message"),
        None => format!("an error event with no message ({body})"),
    });
    let lower = message.to_ascii_lowercase();
    // A spend limit is never retried, so it is named only by what says so for
    // certain: 402, Anthropic's `billing_error`, OpenAI's `insufficient_quota`.
    // The text is read only on 400/403, which are never retried anyway: on a
    // 429, 408, 409 or 5xx (or an error inside a stream) words such as
    // "quota" are common in plain rate-limit and outage messages (Azure
    // links to ".../quotaincrease"), and those must stay retryable.
    let spend = status == Some(402)
        || kind == "billing_error"
        || kind == "insufficient_quota"
        || code == "insufficient_quota"
        || (matches!(status, Some(400 | 403))
            && [
                "credit balance",
                "spend limit",
                "usage limit",
                "billing",
                "quota",
            ]
            .iter()
            .any(|k| lower.contains(k)));
    let context = kind == "request_too_large"
        // llama-server's, on a prompt larger than its slot's context.
        || kind == "exceed_context_size_error"
        || code == "context_length_exceeded"
        || status == Some(413)
        || [
            "prompt is too long",
            "context window",
            "context length",
            "context size",
            "maximum context",
            "too many tokens",
        ]
        .iter()
        .any(|k| lower.contains(k));
    if spend {
        return LlmError::SpendLimit { message };
    }
    match (status, kind) {
        (_, "rate_limit_error") | (Some(429), _) => LlmError::RateLimited {
            retry_after,
            message,
        },
        (_, "overloaded_error") | (Some(529), _) => LlmError::Overloaded { message },
        (_, "authentication_error") | (Some(401), _) => LlmError::Authentication { message },
        (_, "permission_error") | (Some(403), _) => LlmError::PermissionDenied { message },
        _ if context => LlmError::ContextExceeded { message },
        (_, "invalid_request_error") | (Some(400), _) => LlmError::InvalidRequest { message },
        (Some(status), _) => LlmError::Api {
            status,
            message,
            retryable: matches!(status, 408 | 409) || status >= 500,
        },
        // An error inside a 200 stream: the server's own failure, worth another try.
        (None, kind) => LlmError::Api {
            status: 200,
            message: if kind.is_empty() {
                message
            } else {
                format!("{kind}: {message}")
            },
            retryable: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn e(status: u16, kind: &str, message: &str) -> LlmError {
        error_from_body(
            Some(status),
            &json!({"error":{"type":kind,"message":message}}),
            None,
        )
    }

    #[test]
    fn statuses_and_types_map_to_kinds() {
        assert!(matches!(
            e(529, "overloaded_error", "Overloaded"),
            LlmError::Overloaded { .. }
        ));
        assert!(matches!(
            e(401, "", "bad key"),
            LlmError::Authentication { .. }
        ));
        assert!(matches!(
            e(403, "", "no"),
            LlmError::PermissionDenied { .. }
        ));
        assert!(matches!(
            e(413, "", "big"),
            LlmError::ContextExceeded { .. }
        ));
        assert!(matches!(
            e(
                400,
                "invalid_request_error",
                "prompt is too long: 1000001 tokens > 1000000 maximum"
            ),
            LlmError::ContextExceeded { .. }
        ));
        assert!(matches!(
            e(400, "", "bad field"),
            LlmError::InvalidRequest { .. }
        ));
        assert!(matches!(
            e(402, "billing_error", "pay"),
            LlmError::SpendLimit { .. }
        ));
        assert!(matches!(
            e(
                400,
                "invalid_request_error",
                "Your credit balance is too low"
            ),
            LlmError::SpendLimit { .. }
        ));
        let quota = error_from_body(
            Some(429),
            &json!({"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota"}}),
            None,
        );
        assert!(matches!(quota, LlmError::SpendLimit { .. }), "{quota:?}");
        assert!(quota.never_retry());
        let openai_ctx = error_from_body(
            Some(400),
            &json!({"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"This model's maximum is 8192"}}),
            None,
        );
        assert!(matches!(openai_ctx, LlmError::ContextExceeded { .. }));
        // llama-server's, older and newer builds: a numeric code, its own type.
        for message in [
            "the request exceeds the available context size, try increasing it",
            "request (16433 tokens) exceeds the available context size (16384 tokens)",
        ] {
            let llama_ctx = error_from_body(
                Some(400),
                &json!({"error":{"code":400,"type":"exceed_context_size_error","message":message,
                                 "n_prompt_tokens":16433,"n_ctx":16384}}),
                None,
            );
            assert!(
                matches!(llama_ctx, LlmError::ContextExceeded { .. }),
                "{llama_ctx:?}"
            );
        }
        assert!(e(500, "api_error", "x").is_retryable());
        assert!(e(408, "", "x").is_retryable());
        assert!(e(409, "conflict_error", "x").is_retryable());
        assert!(!e(404, "not_found_error", "x").is_retryable());
        for never in [400, 401, 403, 413, 402] {
            assert!(e(never, "", "x").never_retry(), "{never}");
            assert!(!e(never, "", "x").is_retryable(), "{never}");
        }
    }

    #[test]
    fn spend_limits_are_told_apart_from_rate_limits() {
        // Retryable statuses keep their kind whatever the text says.
        for (status, kind, message) in [
            (
                429,
                "tokens",
                "Rate limit reached for gpt-x on tokens per min. Your quota resets soon.",
            ),
            (
                429,
                "rate_limit_error",
                "This request would exceed your usage limit of 50 requests per minute",
            ),
            (
                429,
                "",
                "Please go here: https://aka.ms/oai/quotaincrease to increase the rate limit",
            ),
            (503, "server_error", "the billing service is down"),
            (
                529,
                "overloaded_error",
                "Overloaded; quota checks are delayed",
            ),
            (408, "", "billing lookup timed out"),
            (
                409,
                "conflict_error",
                "quota record was updated concurrently",
            ),
        ] {
            let err = e(status, kind, message);
            assert!(
                !matches!(err, LlmError::SpendLimit { .. }),
                "{status}: {err:?}"
            );
            assert!(err.is_retryable(), "{status}: {err:?}");
            assert!(!err.never_retry(), "{status}: {err:?}");
        }
        assert!(matches!(
            e(429, "tokens", "Rate limit reached; quota"),
            LlmError::RateLimited { .. }
        ));
        // An error event inside a 200 stream is not matched on its text either.
        let in_stream = error_from_body(
            None,
            &json!({"error":{"type":"api_error","message":"quota service unavailable"}}),
            None,
        );
        assert!(in_stream.is_retryable(), "{in_stream:?}");

        // Typed spend limits, whatever the status.
        for (status, body) in [
            (402, json!({"error":{"type":"","message":"pay up"}})),
            (400, json!({"error":{"type":"billing_error","message":"x"}})),
            (
                429,
                json!({"error":{"type":"insufficient_quota","message":"x"}}),
            ),
            (
                429,
                json!({"error":{"type":"requests","code":"insufficient_quota","message":"x"}}),
            ),
        ] {
            let err = error_from_body(Some(status), &body, None);
            assert!(
                matches!(err, LlmError::SpendLimit { .. }),
                "{body}: {err:?}"
            );
            assert!(err.never_retry());
        }
        // Text alone only on statuses that are never retried anyway.
        for (status, message) in [
            (400, "Your credit balance is too low to access the API"),
            (400, "You have reached your specified API usage limits"),
            (403, "Billing is not enabled for this project"),
            (403, "You exceeded your current quota"),
        ] {
            let err = e(status, "", message);
            assert!(
                matches!(err, LlmError::SpendLimit { .. }),
                "{status}: {err:?}"
            );
        }
    }

    #[test]
    fn odd_bodies_still_give_a_message() {
        let plain = error_from_body(Some(500), &json!({"error": "boom"}), None);
        assert_eq!(plain.to_string(), "API error (HTTP 500): boom");
        let detail = error_from_body(Some(422), &json!({"detail": "bad"}), None);
        assert!(detail.to_string().contains("bad"));
        let empty = error_from_body(Some(503), &Value::Null, None);
        assert!(empty.to_string().contains("HTTP 503"));
        let in_stream = error_from_body(
            None,
            &json!({"error":{"type":"api_error","message":"m"}}),
            None,
        );
        assert!(in_stream.is_retryable());
    }

    #[test]
    fn scrub_removes_a_secret() {
        let err = LlmError::Authentication {
            message: "key sk-123 is invalid".into(),
        }
        .scrub(Some("sk-123"));
        assert_eq!(
            err.to_string(),
            "authentication failed: key <redacted> is invalid (is the API key right?)"
        );
    }
}
