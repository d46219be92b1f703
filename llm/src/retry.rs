//! When and how long to wait before sending a failed model call again: the
//! server's `retry-after-ms` / `retry-after` and `x-should-retry` first, else
//! exponential backoff with jitter. Shared by every provider.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use reqwest::header::HeaderMap;

use crate::{LlmError, Response, Result, StreamEvent};

/// How a client retries. `max_retries` counts sends after the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    /// The first backoff; it doubles per retry up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// The longest server-requested delay obeyed; longer ones are cut to this.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 8,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// No retries at all (tests, or callers that retry themselves).
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The wait before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(delay) = retry_after {
            return delay.min(self.max_retry_after);
        }
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_backoff);
        // Up to a quarter off, so that many clients do not retry in step.
        base.mul_f64(1.0 - fastrand::f64() * 0.25)
    }
}

/// A failed attempt and what the server said about trying again.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: LlmError,
    /// `x-should-retry`, when the server sent it.
    pub should_retry: Option<bool>,
    /// `retry-after-ms` or `retry-after`, when the server sent one.
    pub retry_after: Option<Duration>,
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        let retry_after = error.retry_after();
        Self {
            error,
            should_retry: None,
            retry_after,
        }
    }
}

impl Failure {
    fn retryable(&self) -> bool {
        !self.error.never_retry() && self.should_retry.unwrap_or(self.error.is_retryable())
    }
}

/// `x-should-retry: true|false`, if present.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match header(headers, "x-should-retry")?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// `retry-after-ms`, else `retry-after` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    if let Some(ms) = header(headers, "retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
    {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    let value = header(headers, "retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return secs
            .is_finite()
            .then(|| Duration::from_secs_f64(secs.max(0.0)));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(crate) type Events = BoxStream<'static, Result<StreamEvent>>;
/// One attempt at opening a stream; the closure is called once per attempt.
pub(crate) type Open<'a> =
    Box<dyn Fn() -> BoxFuture<'a, Result<Events, Failure>> + Send + Sync + 'a>;

/// Opens a stream, retrying failures that happen before the first event.
pub(crate) async fn open(policy: &RetryPolicy, model: &str, open: &Open<'_>) -> Result<Events> {
    let mut attempt = 0;
    loop {
        match open().await {
            Ok(events) => return Ok(events),
            Err(failure) => wait_or_fail(policy, model, &mut attempt, failure).await?,
        }
    }
}

/// Opens and drains a stream, retrying failures before and during it (a
/// dropped stream, an `error` event, an idle timeout); a retried call starts
/// over, so no partial reply is ever returned.
pub(crate) async fn complete(
    policy: &RetryPolicy,
    model: &str,
    open: &Open<'_>,
) -> Result<Response> {
    let mut attempt = 0;
    loop {
        let failure = match open().await {
            Ok(events) => match crate::collect(events).await {
                Ok(response) => return Ok(response),
                Err(error) => Failure::from(error),
            },
            Err(failure) => failure,
        };
        wait_or_fail(policy, model, &mut attempt, failure).await?;
    }
}

async fn wait_or_fail(
    policy: &RetryPolicy,
    model: &str,
    attempt: &mut u32,
    failure: Failure,
) -> Result<()> {
    if !failure.retryable() || *attempt >= policy.max_retries {
        return Err(failure.error);
    }
    let delay = policy.delay(*attempt, failure.retry_after);
    tracing::warn!(model, attempt = *attempt + 1, ?delay, error = %failure.error, "model call failed; retrying");
    tokio::time::sleep(delay).await;
    *attempt += 1;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn retry_after_forms() {
        let now = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap();
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
                now
            ),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3")]), now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sat, 21 Nov 2026 12:00:07 GMT")]),
                now
            ),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sat, 21 Nov 2026 11:00:00 GMT")]),
                now
            ),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "false")])),
            Some(false)
        );
        assert_eq!(should_retry(&HeaderMap::new()), None);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let p = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        };
        for attempt in 0..8 {
            let full = Duration::from_millis(500 * (1 << attempt)).min(Duration::from_secs(8));
            let d = p.delay(attempt, None);
            assert!(d <= full && d >= full.mul_f64(0.75), "{attempt}: {d:?}");
        }
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(600))),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn server_hints_never_override_the_never_list() {
        let hinted = |error, should_retry| Failure {
            error,
            should_retry,
            retry_after: None,
        };
        let auth = LlmError::Authentication {
            message: "no".into(),
        };
        assert!(!hinted(auth, Some(true)).retryable());
        let limited = LlmError::RateLimited {
            retry_after: None,
            message: "slow".into(),
        };
        assert!(!hinted(limited, Some(false)).retryable());
        let odd = LlmError::Api {
            status: 418,
            message: "teapot".into(),
            retryable: false,
        };
        assert!(hinted(odd, Some(true)).retryable());
    }
}
