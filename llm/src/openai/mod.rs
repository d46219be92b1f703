//! A client of any OpenAI-compatible Chat Completions server (OpenAI,
//! Ollama, vLLM, llama.cpp's server, OpenRouter): streamed tool calls,
//! strict `json_schema` output, usage when the server reports it, Bearer auth.

mod body;
pub(crate) mod stream;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::http;
use crate::output;
use crate::retry::{self, Events, Failure, Open};
use crate::{
    LlmError, Model, ModelConfig, ModelLimits, Provider, Request, Response, Result, StreamEvent,
};

pub const DEFAULT_OPENAI_URL: &str = "https://api.openai.com/v1";

/// A client of one model on an OpenAI-compatible server.
pub struct OpenAiClient {
    config: ModelConfig,
    http: reqwest::Client,
    /// Whether the model writes native tool calls (`output::Habit`).
    habit: std::sync::Arc<output::Habit>,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    pub fn new(config: ModelConfig) -> Result<Self> {
        if config.provider != Provider::OpenAi {
            return Err(LlmError::Config(format!(
                "{} is not an OpenAI-compatible model",
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
            habit: std::sync::Arc::default(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// `{base}/chat/completions`: the base URL is used as given (with its
    /// `/v1`, as `OPENAI_BASE_URL` is written), since servers mount the API
    /// under different paths (`…/api/v1`, `…/openai`); nothing is inserted.
    fn url(&self) -> String {
        format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        )
    }

    /// A 404 names the URL that was asked, and says the base is used as given.
    fn hint_not_found(&self, error: LlmError) -> LlmError {
        match error {
            LlmError::Api {
                status: 404,
                message,
                retryable,
            } => LlmError::Api {
                status: 404,
                message: format!(
                    "{message} (POST {}: the base URL is used as given; \
                     OpenAI-compatible servers usually want it to end in /v1)",
                    without_credentials(&self.url())
                ),
                retryable,
            },
            other => other,
        }
    }

    fn secret(&self) -> Option<&str> {
        self.config.api_key.as_ref().map(|k| k.expose())
    }

    async fn attempt(&self, body: &Value) -> Result<Events, Failure> {
        let mut request = self
            .http
            .post(self.url())
            .header("accept", "text/event-stream")
            .json(body);
        if let Some(key) = &self.config.api_key {
            request = request.header(
                reqwest::header::AUTHORIZATION,
                http::secret_header(&format!("Bearer {}", key.expose()))?,
            );
        }
        let timeouts = &self.config.timeouts;
        let response = http::send(request, timeouts.request)
            .await
            .map_err(|f| Failure {
                error: self.hint_not_found(f.error.scrub(self.secret())),
                ..f
            })?;
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let events = if is_json {
            // A server that ignored `stream: true`.
            let body: Value = tokio::time::timeout(timeouts.request, response.json())
                .await
                .map_err(|_| {
                    LlmError::Timeout("the completion body did not arrive in time".into())
                })?
                .map_err(|e| {
                    LlmError::Stream(format!("a malformed completion: {}", http::describe(&e)))
                })?;
            let response = stream::completion(&body)?;
            let mut events = Vec::new();
            let text = response.text();
            if !text.is_empty() {
                events.push(Ok(StreamEvent::TextDelta(text)));
            }
            for (id, name, input) in response.tool_uses() {
                events.push(Ok(StreamEvent::ToolCall {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    input: input.clone(),
                }));
            }
            events.push(Ok(StreamEvent::Completed(response)));
            futures::stream::iter(events).boxed()
        } else {
            crate::repetition::guard(http::sse(
                response,
                timeouts.idle,
                stream::Assembler::default(),
            ))
        };
        let secret = self.secret().map(str::to_owned);
        Ok(events
            .map(move |item| item.map_err(|e| e.scrub(secret.as_deref())))
            .boxed())
    }

    /// The cap of `request`: its own or the configured one, lowered to the
    /// model's maximum when that is configured.
    fn cap(&self, request: &Request) -> u64 {
        let wanted = request
            .max_output_tokens
            .unwrap_or(self.config.max_output_tokens);
        match self.config.limits.max_output_tokens {
            Some(limit) => wanted.min(limit),
            None => wanted,
        }
    }

    fn prepare(&self, request: &Request) -> Value {
        let max_tokens = self.cap(request);
        let mut body = body::body(
            &self.config.model,
            &self.config.max_tokens_field,
            max_tokens,
            request,
            body::dialect(self.config.server()),
        );
        if let Some(t) = self.config.sampling_temperature() {
            body["temperature"] = serde_json::json!(t);
        }
        body
    }

    /// The mode of `request`'s call, and whether it follows the model.
    fn mode(&self, request: &Request) -> (output::Mode, bool) {
        let adaptive = self.config.adaptive_mode();
        let base = self.config.output_mode(!request.tools.is_empty());
        (self.habit.mode(base, adaptive), adaptive)
    }

    fn opener<'a>(&'a self, body: &'a Value) -> Open<'a> {
        Box::new(move || Box::pin(self.attempt(body)))
    }
}

impl Model for OpenAiClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    fn stream(&self, request: Request) -> BoxFuture<'_, Result<Events>> {
        Box::pin(async move {
            let (mode, adaptive) = self.mode(&request);
            let body = self.prepare(&output::shape(&request, mode));
            let events =
                retry::open(&self.config.retry, &self.config.model, &self.opener(&body)).await?;
            let habit = self.habit.clone();
            let model = self.config.model.clone();
            let events = events
                .inspect(move |event| {
                    if let Ok(crate::StreamEvent::Completed(raw)) = event {
                        habit.learn(mode, adaptive, raw, &model);
                    }
                })
                .boxed();
            Ok(output::unshape_events(events, mode, request))
        })
    }

    fn complete(&self, request: Request) -> BoxFuture<'_, Result<Response>> {
        Box::pin(async move {
            let (mode, adaptive) = self.mode(&request);
            let body = self.prepare(&output::shape(&request, mode));
            let response =
                retry::complete(&self.config.retry, &self.config.model, &self.opener(&body))
                    .await?;
            self.habit
                .learn(mode, adaptive, &response, &self.config.model);
            Ok(output::unshape(response, mode, &request))
        })
    }

    /// Compatible servers do not report limits: only the configured ones are known.
    fn limits(&self) -> BoxFuture<'_, ModelLimits> {
        Box::pin(std::future::ready(self.config.limits))
    }

    fn output_cap(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(std::future::ready(Some(self.cap(&Request::default()))))
    }
}

/// A URL with any user and password left out, for an error message.
fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Err(_) => url.to_owned(),
    }
}
