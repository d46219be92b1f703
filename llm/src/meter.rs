//! Counts what a model answered, request by request, for whoever pays: a
//! [`Metered`] model shares a [`Meter`] that keeps the usage of every
//! request completed through it (repairs and retried streams included).

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::{Model, ModelLimits, Request, Response, Result, StreamEvent, Usage};

/// The usage of each request answered so far (`None`: the server reported none).
#[derive(Clone, Default)]
pub struct Meter(Arc<Mutex<Vec<Option<Usage>>>>);

impl Meter {
    fn push(&self, usage: Option<Usage>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(usage);
    }

    /// What was counted since the last call.
    pub fn take(&self) -> Vec<Option<Usage>> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A model whose every answered request is counted on a [`Meter`].
pub struct Metered {
    inner: Arc<dyn Model>,
    meter: Meter,
}

impl Metered {
    pub fn new(inner: Arc<dyn Model>, meter: Meter) -> Self {
        Self { inner, meter }
    }
}

impl Model for Metered {
    fn stream(
        &self,
        request: Request,
    ) -> BoxFuture<'_, Result<BoxStream<'static, Result<StreamEvent>>>> {
        let meter = self.meter.clone();
        Box::pin(async move {
            let events = self.inner.stream(request).await?;
            Ok(events
                .map(move |event| {
                    if let Ok(StreamEvent::Completed(response)) = &event {
                        meter.push(response.usage);
                    }
                    event
                })
                .boxed())
        })
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn complete(&self, request: Request) -> BoxFuture<'_, Result<Response>> {
        Box::pin(async move {
            let response = self.inner.complete(request).await?;
            self.meter.push(response.usage);
            Ok(response)
        })
    }

    fn limits(&self) -> BoxFuture<'_, ModelLimits> {
        self.inner.limits()
    }

    fn output_cap(&self) -> BoxFuture<'_, Option<u64>> {
        self.inner.output_cap()
    }
}
