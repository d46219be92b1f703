//! The full-screen console's loop: terminal events and feed events go into
//! the [`App`], the screen is redrawn, until the human quits.

use std::future::Future;
use std::io::Write as _;
use std::time::{Duration, Instant};

use crossterm::event::EventStream;
use futures::StreamExt;

use crate::app::{Action, App};
use crate::feed::Feed;
use crate::tui::Tui;
use crate::{Config, Ended, Result};

/// Liveness and the reconnect banner count seconds: redraw this often even
/// when nothing arrives.
const TICK: Duration = Duration::from_millis(250);
/// Feed events taken in one go before the screen is redrawn (replay is fast).
const BATCH: usize = 512;

/// Runs the full-screen console on this process's terminal until Ctrl-C,
/// Ctrl-D or `shutdown`. The screen comes up at once: while the server cannot
/// be reached it says so, and the feed keeps trying.
pub(crate) async fn run(
    config: &Config,
    session_id: &str,
    shutdown: impl Future<Output = ()>,
) -> Ended {
    let mut app = App::new(session_id, &config.nats.url);
    app.show_musings = config.show_musings;
    let result = run_app(config, &mut app, shutdown).await;
    Ended {
        attached: app.attached,
        result,
    }
}

async fn run_app(config: &Config, app: &mut App, shutdown: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(shutdown);
    let mut feed = Feed::start(&config.nats, &app.session_id, &config.identity)
        .in_workspace(config.workspace.clone());
    let mut tui = Tui::enter()?;
    let mut events = EventStream::new();
    // What drawing keeps between frames (the wrapped conversation); the
    // decisions stay in `app`.
    let mut view = crate::ui::ScreenState::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tui.terminal
            .draw(|frame| crate::ui::draw_with(frame, app, &mut view, Instant::now()))?;
        tokio::select! {
            () = &mut shutdown => break,
            event = events.next() => match event {
                Some(Ok(event)) => match app.event(&event) {
                    Some(Action::Quit) => break,
                    Some(action) => run_action(&mut tui, &feed, action)?,
                    None => {}
                },
                Some(Err(e)) => return Err(e.into()),
                None => break,
            },
            event = feed.events.recv() => {
                let Some(event) = event else { break };
                let now = Instant::now();
                app.apply(event, now);
                for _ in 1..BATCH {
                    match feed.events.try_recv() {
                        Ok(event) => app.apply(event, now),
                        Err(_) => break,
                    }
                }
                if let Some(action) = app.after_feed() {
                    run_action(&mut tui, &feed, action)?;
                }
            }
            _ = tick.tick() => {}
        }
    }
    drop(tui);
    Ok(())
}

/// Does what the app asked for (quitting is the loop's).
fn run_action(tui: &mut Tui, feed: &Feed, action: Action) -> Result<()> {
    match action {
        Action::Send { message_id, text } => feed.send(message_id, text),
        Action::Redraw => tui.terminal.clear()?,
        Action::Bell => {
            // BEL through the backend, between two frames: the terminal
            // rings (or flashes) and shows nothing.
            let backend = tui.terminal.backend_mut();
            backend.write_all(b"\x07")?;
            backend.flush()?;
        }
        Action::Quit => {}
    }
    Ok(())
}
