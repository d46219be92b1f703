//! The Anthropic Messages API client: streaming SSE, prompt-cache
//! breakpoints, structured output through `output_config.format`, model
//! limits from `GET /v1/models/{id}`, typed errors and retries.

mod body;
pub(crate) mod sse;

use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::http;
use crate::output;
use crate::retry::{self, Events, Failure, Open};
use crate::{LlmError, Model, ModelConfig, ModelLimits, Provider, Request, Response, Result};

pub const DEFAULT_ANTHROPIC_URL: &str = "https://api.anthropic.com";
/// The longest wait for `GET /v1/models/{id}`.
const MODELS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The `anthropic-version` sent unless configured otherwise.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// A client of one Anthropic model.
pub struct AnthropicClient {
    config: ModelConfig,
    http: reqwest::Client,
    /// What `GET /v1/models/{id}` said, once it has answered for good.
    reported: OnceCell<ModelLimits>,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AnthropicClient {
    pub fn new(config: ModelConfig) -> Result<Self> {
        if config.provider != Provider::Anthropic {
            return Err(LlmError::Config(format!(
                "{} is not an Anthropic model",
                config.spec()
            )));
        }
        if config.model.is_empty() {
            return Err(LlmError::Config("no model configured".into()));
        }
        let http = http::client(&config.timeouts)?;
        Ok(Self {
            config,
            http,
            reported: OnceCell::new(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_url.trim_end_matches('/'))
    }

    fn headers(&self) -> Result<HeaderMap> {
        let mut headers = HeaderMap::new();
        let version = reqwest::header::HeaderValue::from_str(&self.config.anthropic_version)
            .map_err(|_| LlmError::Config("anthropic-version is not a valid header".into()))?;
        headers.insert("anthropic-version", version);
        if let Some(key) = &self.config.api_key {
            headers.insert("x-api-key", http::secret_header(key.expose())?);
        }
        Ok(headers)
    }

    fn secret(&self) -> Option<&str> {
        self.config.api_key.as_ref().map(|k| k.expose())
    }

    /// The configured limits, completed by what the API reports. Asked once;
    /// a transient failure is asked again on the next call, a definite one
    /// (404, a proxy without the endpoint) is remembered as "unknown".
    async fn limits_now(&self) -> ModelLimits {
        let wanted = self.config.limits;
        if wanted.context_window.is_some() && wanted.max_output_tokens.is_some() {
            return wanted;
        }
        let reported = self
            .reported
            .get_or_try_init(|| self.fetch_limits())
            .await
            .copied()
            .unwrap_or_default();
        ModelLimits {
            context_window: wanted.context_window.or(reported.context_window),
            max_output_tokens: wanted.max_output_tokens.or(reported.max_output_tokens),
        }
    }

    async fn fetch_limits(&self) -> Result<ModelLimits, ()> {
        let url = self.url(&format!("/v1/models/{}", self.config.model));
        let headers = self.headers().map_err(|_| ())?;
        // A short wait: this lookup must not hold up a start or a call for long.
        let timeout = self.config.timeouts.request.min(MODELS_TIMEOUT);
        let request = self.http.get(url).headers(headers);
        match http::send(request, timeout).await {
            Ok(response) => {
                let body: Value = tokio::time::timeout(timeout, response.json())
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .unwrap_or(Value::Null);
                let limits = ModelLimits {
                    context_window: body["max_input_tokens"].as_u64(),
                    max_output_tokens: body["max_tokens"].as_u64(),
                };
                tracing::debug!(model = %self.config.model, ?limits, "model limits from the API");
                Ok(limits)
            }
            Err(failure) if failure.error.is_retryable() => {
                let error = failure.error.scrub(self.secret());
                tracing::warn!(model = %self.config.model, %error, "could not read the model's limits; will ask again");
                Err(())
            }
            Err(failure) => {
                let error = failure.error.scrub(self.secret());
                tracing::info!(model = %self.config.model, %error, "the API does not report this model's limits");
                Ok(ModelLimits::default())
            }
        }
    }

    /// One attempt: send, check the status, and stream the events.
    async fn attempt(&self, body: &bytes::Bytes) -> Result<Events, Failure> {
        let request = self
            .http
            .post(self.url("/v1/messages"))
            .headers(self.headers()?)
            .header("accept", "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        let response = http::send(request, self.config.timeouts.request)
            .await
            .map_err(|f| Failure {
                error: f.error.scrub(self.secret()),
                ..f
            })?;
        let events = crate::repetition::guard(http::sse(
            response,
            self.config.timeouts.idle,
            sse::Assembler::default(),
        ));
        let secret = self.secret().map(str::to_owned);
        Ok(events
            .map(move |item| item.map_err(|e| e.scrub(secret.as_deref())))
            .boxed())
    }

    /// The cap of `request`: its own or the configured one, lowered to the
    /// model's maximum when that is known.
    async fn cap(&self, request: &Request) -> u64 {
        let wanted = request
            .max_output_tokens
            .unwrap_or(self.config.max_output_tokens);
        match self.limits_now().await.max_output_tokens {
            Some(limit) => wanted.min(limit),
            None => wanted,
        }
    }

    /// The request's body, serialised once for every attempt.
    async fn prepare(&self, request: &Request) -> Result<bytes::Bytes> {
        let max_tokens = self.cap(request).await;
        body::body(&self.config.model, max_tokens, request)
            .and_then(|body| serde_json::to_vec(&body))
            .map(bytes::Bytes::from)
            .map_err(|e| LlmError::InvalidRequest {
                message: format!("the request could not be encoded: {e}"),
            })
    }

    fn opener<'a>(&'a self, body: &'a bytes::Bytes) -> Open<'a> {
        Box::new(move || Box::pin(self.attempt(body)))
    }
}

impl Model for AnthropicClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    fn stream(&self, request: Request) -> BoxFuture<'_, Result<Events>> {
        Box::pin(async move {
            let mode = self.config.output_mode(!request.tools.is_empty());
            let body = self.prepare(&output::shape(&request, mode)).await?;
            let events =
                retry::open(&self.config.retry, &self.config.model, &self.opener(&body)).await?;
            Ok(output::unshape_events(events, mode, request))
        })
    }

    fn complete(&self, request: Request) -> BoxFuture<'_, Result<Response>> {
        Box::pin(async move {
            let mode = self.config.output_mode(!request.tools.is_empty());
            let body = self.prepare(&output::shape(&request, mode)).await?;
            let response =
                retry::complete(&self.config.retry, &self.config.model, &self.opener(&body))
                    .await?;
            Ok(output::unshape(response, mode, &request))
        })
    }

    fn limits(&self) -> BoxFuture<'_, ModelLimits> {
        Box::pin(self.limits_now())
    }

    fn output_cap(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async move { Some(self.cap(&Request::default()).await) })
    }
}
