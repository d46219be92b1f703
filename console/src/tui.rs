//! The terminal while the full-screen console runs: raw mode, the alternate
//! screen, mouse and bracketed paste, all undone on drop and on panic, so the
//! terminal is left as it was found.

use std::io::{self, Stdout};
use std::sync::Once;

use crossterm::event::{DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste};
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use crossterm::{Command, execute};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

pub(crate) type Backend = CrosstermBackend<Stdout>;

/// The terminal in full-screen mode; dropping it restores the terminal.
pub(crate) struct Tui {
    pub(crate) terminal: Terminal<Backend>,
}

impl Tui {
    /// Takes over the terminal. On failure, whatever was already changed is undone.
    pub(crate) fn enter() -> io::Result<Self> {
        install_panic_hook();
        let entered = enable_raw_mode()
            .and_then(|()| {
                execute!(
                    io::stdout(),
                    EnterAlternateScreen,
                    EnableMouseButtons,
                    EnableBracketedPaste
                )
            })
            .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())));
        match entered {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the terminal back: cooked mode, the main screen, a visible cursor.
/// Each step is tried even if an earlier one fails; errors are only logged,
/// since there is nothing better to do with them on the way out.
pub(crate) fn restore() {
    if let Err(e) = disable_raw_mode() {
        tracing::warn!(error = %e, "could not leave raw mode");
    }
    if let Err(e) = execute!(
        io::stdout(),
        DisableBracketedPaste,
        DisableMouseCapture,
        LeaveAlternateScreen,
        crossterm::cursor::Show
    ) {
        tracing::warn!(error = %e, "could not restore the terminal");
    }
}

/// Mouse reporting of buttons and the wheel only (X11 mode with SGR
/// coordinates). crossterm's `EnableMouseCapture` also reports every motion,
/// which would wake the console for each move of the mouse.
struct EnableMouseButtons;

impl Command for EnableMouseButtons {
    fn write_ansi(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        f.write_str("\x1b[?1000h\x1b[?1006h")
    }

    /// The Windows console has no such modes; it reports the mouse as a whole.
    #[cfg(windows)]
    fn execute_winapi(&self) -> io::Result<()> {
        crossterm::event::EnableMouseCapture.execute_winapi()
    }
}

/// A panic restores the terminal before the message is printed, so that
/// the message is readable and the shell usable.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
