//! Colours and styles of the console, in one place.

use ratatui::style::{Color, Modifier, Style};

/// Orchestrators take these colours in turn: I, II, III…
const ORCHESTRATOR_COLOURS: [Color; 6] = [
    Color::Cyan,
    Color::Magenta,
    Color::LightBlue,
    Color::LightGreen,
    Color::LightRed,
    Color::LightMagenta,
];

pub fn frame() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub fn title() -> Style {
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
}

pub fn subtitle() -> Style {
    Style::new().fg(Color::Yellow).add_modifier(Modifier::DIM)
}

pub fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub fn human() -> Style {
    Style::new().fg(Color::Green).add_modifier(Modifier::BOLD)
}

pub fn arbiter() -> Style {
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
}

pub fn orchestrator(number: u32) -> Style {
    let index = (number.max(1) - 1) as usize % ORCHESTRATOR_COLOURS.len();
    Style::new()
        .fg(ORCHESTRATOR_COLOURS[index])
        .add_modifier(Modifier::BOLD)
}

pub fn note() -> Style {
    Style::new().add_modifier(Modifier::DIM)
}

pub fn musing() -> Style {
    Style::new()
        .fg(Color::DarkGray)
        .add_modifier(Modifier::ITALIC)
}

pub fn error() -> Style {
    Style::new().fg(Color::Red)
}

pub fn banner() -> Style {
    Style::new()
        .fg(Color::White)
        .bg(Color::Red)
        .add_modifier(Modifier::BOLD)
}

/// The context bar takes the colour of the warnings the models get at 70 % and 85 %.
pub fn context(pct: f32) -> Style {
    let colour = if pct >= 85.0 {
        Color::Red
    } else if pct >= 70.0 {
        Color::Yellow
    } else {
        Color::Green
    };
    Style::new().fg(colour)
}

pub fn good() -> Style {
    Style::new().fg(Color::Green)
}

pub fn waiting() -> Style {
    Style::new().fg(Color::Cyan)
}

pub fn warning() -> Style {
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
}

pub fn bad() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}
