//! What every phase shares: the options, the mock model and its recorder,
//! where the systems keep their files, and the settings a phase changes for
//! the systems started after it ([`Ctx::system`] starts one).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use arbiter_tests::MockAnthropic;

use crate::cli::RunOptions;
use crate::model::Recorder;
use crate::system::{Shape, System};

/// What every phase shares.
pub struct Ctx {
    pub opts: RunOptions,
    /// The OTLP endpoint the next systems' children export to (the otel phase).
    pub otlp: std::sync::Mutex<Option<String>>,
    /// The webhook the next systems' coordinator POSTs to (the hooks phase).
    pub hook_url: std::sync::Mutex<Option<String>>,
    pub mock: MockAnthropic,
    pub recorder: Arc<Recorder>,
    /// The workers' runtime for the systems started from now on.
    pub runtime: std::sync::Mutex<arbiter_worker::Runtime>,
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Ctx {
    /// Starts the mock model, answered by a fresh recorder, and picks the
    /// directory the systems keep their files in: `--keep`'s, or a
    /// temporary one removed with the `Ctx`.
    pub async fn new(opts: RunOptions) -> anyhow::Result<Self> {
        let (dir, temp) = match &opts.keep {
            Some(dir) => (dir.clone(), None),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("arbiter-bench-")
                    .tempdir()?;
                (temp.path().to_owned(), Some(temp))
            }
        };
        let mock = MockAnthropic::start().await;
        mock.set_recording(false);
        let recorder = Arc::new(Recorder::new()?);
        let responder = recorder.clone();
        mock.set_responder(move |request| responder.respond(request));
        Ok(Self {
            opts,
            otlp: std::sync::Mutex::new(None),
            hook_url: std::sync::Mutex::new(None),
            mock,
            recorder,
            runtime: std::sync::Mutex::new(arbiter_worker::Runtime::Native),
            dir,
            _temp: temp,
        })
    }

    /// The directory a phase keeps its files in (made if missing).
    pub fn dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// A fresh system (server, coordinator, workers) for one phase.
    pub async fn system(
        &self,
        name: &str,
        workers: usize,
        slots_per_worker: usize,
    ) -> anyhow::Result<System> {
        self.system_parking(name, workers, slots_per_worker, None)
            .await
    }

    /// [`Ctx::system`] whose Orchestrators park after `park_after` waiting
    /// (`None`: the worker's default).
    pub async fn system_parking(
        &self,
        name: &str,
        workers: usize,
        slots_per_worker: usize,
        park_after: Option<std::time::Duration>,
    ) -> anyhow::Result<System> {
        self.recorder.reset()?;
        let runtime = *self
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = self.dir(name)?;
        let otlp = self
            .otlp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let hook_url = self
            .hook_url
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        System::start(
            &self.mock,
            &self.recorder,
            Shape {
                nats_config: self.opts.nats_config.as_deref(),
                workers: workers.max(1),
                slots_per_worker,
                dir: &dir,
                otlp: otlp.as_deref(),
                hook_url: hook_url.as_deref(),
                runtime,
                claude_bin: self.opts.claude_bin.as_deref(),
                codex_bin: self.opts.codex_bin.as_deref(),
                park_after,
            },
        )
        .await
    }
}
