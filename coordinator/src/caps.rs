//! Limits per console identity, so that one console cannot turn a burst of
//! messages into a burst of model calls: how many of its sessions may be at
//! work at once, and how fast it may send (a token bucket). A session is at
//! work while its Arbiter is thinking or has queued input, or an Orchestrator
//! is active; it counts against the console whose message put it to work.
//!
//! The intake asks [`Caps::spend`] for every human message as it comes,
//! before anything else is done with it (before its session is looked up or
//! made), and [`Caps::admit`] once it knows its session; a refused one never
//! reaches its session's Arbiter. Sessions say when they stop being at work
//! ([`Caps::settle`]). A limit's refusals are said in a session's log once
//! per run ([`Caps::tell`]), so that a console sending as fast as it can
//! cannot fill the session stream with them. Decisions are pure: time is
//! passed in.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Sessions at work at once per console, by default.
pub const DEFAULT_MAX_SESSIONS_PER_CONSOLE: usize = 16;
/// Messages per console, by default: 30 a minute, in bursts of up to 10.
pub const DEFAULT_CONSOLE_RATE: &str = "30/min,burst=10";

/// The limits, as configured. `None` is no limit.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleCaps {
    /// Sessions of one console at work at once.
    pub max_sessions: Option<usize>,
    /// Human messages one console may send.
    pub rate: Option<Rate>,
}

impl ConsoleCaps {
    /// No limits at all.
    pub fn off() -> Self {
        Self {
            max_sessions: None,
            rate: None,
        }
    }
}

impl Default for ConsoleCaps {
    fn default() -> Self {
        Self {
            max_sessions: Some(DEFAULT_MAX_SESSIONS_PER_CONSOLE),
            rate: Rate::from_str(DEFAULT_CONSOLE_RATE).ok(),
        }
    }
}

/// A token bucket: `count` messages per `per`, at most `burst` at once.
/// Written `<count>/<s|min|h>[,burst=<n>]`, e.g. `30/min,burst=10`; the burst
/// is the count when not given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
    pub burst: u32,
}

impl Rate {
    /// A rate from its written form; `off` (or `none`, `0`) is no limit.
    pub fn parse_setting(text: &str) -> Result<Option<Self>, String> {
        match text.trim() {
            "off" | "none" | "0" => Ok(None),
            other => other.parse().map(Some),
        }
    }

    fn per_second(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64()
    }
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?} is not a rate: write it <count>/<s|min|h>[,burst=<n>], \
                 e.g. 30/min,burst=10 (or off)"
            )
        };
        let (rate, burst) = match text.split_once(',') {
            Some((rate, burst)) => (rate, Some(burst)),
            None => (text, None),
        };
        let (count, unit) = rate.split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        let burst = match burst {
            None => count,
            Some(burst) => match burst.split_once('=') {
                Some((key, n)) if key.trim() == "burst" => n.trim().parse().map_err(|_| bad())?,
                _ => return Err(bad()),
            },
        };
        if count == 0 || burst == 0 {
            return Err(bad());
        }
        Ok(Self { count, per, burst })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "h",
            _ => return write!(f, "{}/{:?},burst={}", self.count, self.per, self.burst),
        };
        write!(f, "{}/{unit},burst={}", self.count, self.burst)
    }
}

/// Why a message was refused: the text its session's log shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    Sessions { console: String, max: usize },
    Rate { console: String, rate: Rate },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Sessions { console, max } => write!(
                f,
                "Message refused: console {console:?} already has {max} sessions at work, the \
                 most it may have at once. Send it again once one of them is idle, or raise \
                 the limit (arbiter-coordinator --max-sessions-per-console, or \
                 ARBITER_MAX_SESSIONS_PER_CONSOLE). Until one is idle, any more messages it \
                 sends to other sessions are refused as well, and not logged one by one."
            ),
            Refusal::Rate { console, rate } => write!(
                f,
                "Message refused: console {console:?} is sending faster than {rate} messages. \
                 Wait a moment and send it again, or raise the limit (arbiter-coordinator \
                 --console-rate, or ARBITER_CONSOLE_RATE). Until it slows down, any more \
                 messages it sends are refused as well, and not logged one by one."
            ),
        }
    }
}

/// The limits in force and what they count.
pub(crate) struct Caps {
    limits: ConsoleCaps,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    /// Sessions counted, by the console they count against.
    by_console: HashMap<String, HashSet<String>>,
    /// Each session counted: against whom, and why.
    sessions: HashMap<String, Counted>,
    buckets: HashMap<String, Bucket>,
    /// Consoles in a run of refusals by a limit, the first of which was
    /// told, with how many have not been.
    runs: HashMap<(String, Limit), u64>,
}

/// Which limit refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Limit {
    Rate,
    Sessions,
}

impl Refusal {
    fn key(&self) -> (String, Limit) {
        match self {
            Refusal::Rate { console, .. } => (console.clone(), Limit::Rate),
            Refusal::Sessions { console, .. } => (console.clone(), Limit::Sessions),
        }
    }
}

/// Why a session counts: it is at work, or a message admitted for it has not
/// reached it yet (it may be what puts it to work).
struct Counted {
    console: String,
    at_work: bool,
    in_flight: u32,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Caps {
    pub(crate) fn new(limits: ConsoleCaps) -> Self {
        Self {
            limits,
            counts: Mutex::new(Counts::default()),
        }
    }

    /// Spends one of console `console`'s tokens for a message it sent:
    /// every message, whatever becomes of it (a duplicate, one that does not
    /// decode, one for an archived session). `Err` when it has none left.
    /// A message let through ends the console's run of rate refusals.
    pub(crate) fn spend(&self, console: &str, now: Instant) -> Result<(), Refusal> {
        let Some(rate) = self.limits.rate else {
            return Ok(());
        };
        let mut counts = self.lock();
        let bucket = counts.buckets.entry(console.to_owned()).or_insert(Bucket {
            tokens: f64::from(rate.burst),
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate.per_second()).min(f64::from(rate.burst));
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return Err(Refusal::Rate {
                console: console.to_owned(),
                rate,
            });
        }
        bucket.tokens -= 1.0;
        counts.end_run(console, Limit::Rate);
        Ok(())
    }

    /// Whether console `console` may send a message to `session` now (its
    /// token spent, [`Caps::spend`]). A session not counted yet counts
    /// against the console from now on, until it has taken the message
    /// ([`Caps::taken`]) and is not at work.
    pub(crate) fn admit(&self, console: &str, session: &str) -> Result<(), Refusal> {
        let mut counts = self.lock();
        if let Some(counted) = counts.sessions.get_mut(session) {
            counted.in_flight += 1;
            return Ok(());
        }
        let busy = counts.by_console.get(console).map_or(0, HashSet::len);
        if let Some(max) = self.limits.max_sessions
            && busy >= max
        {
            return Err(Refusal::Sessions {
                console: console.to_owned(),
                max,
            });
        }
        counts.count(session, console, false, 1);
        counts.end_run(console, Limit::Sessions);
        Ok(())
    }

    /// Whether `refusal` is to be said in its session's log: the first of a
    /// run of refusals of one console by one limit is; those after it are
    /// not (only counted), until the limit lets a message of the console
    /// through again (the rate: a token spent; sessions: one fewer at work,
    /// or a new one counted). So a console refused by a limit puts at most
    /// one entry in the logs per message the limit lets through.
    pub(crate) fn tell(&self, refusal: &Refusal) -> bool {
        let mut counts = self.lock();
        match counts.runs.entry(refusal.key()) {
            std::collections::hash_map::Entry::Occupied(mut untold) => {
                *untold.get_mut() += 1;
                false
            }
            std::collections::hash_map::Entry::Vacant(run) => {
                run.insert(0);
                true
            }
        }
    }

    /// A session has taken a message [`Caps::admit`] let through.
    pub(crate) fn taken(&self, session: &str) {
        if let Some(counted) = self.lock().sessions.get_mut(session) {
            counted.in_flight = counted.in_flight.saturating_sub(1);
        }
    }

    /// What a session says after each step: at work (counting against
    /// `owner` if it did not count already), or not (`None`).
    pub(crate) fn settle(&self, session: &str, at_work: Option<&str>) {
        let mut counts = self.lock();
        match (counts.sessions.get_mut(session), at_work) {
            (Some(counted), at_work) => {
                counted.at_work = at_work.is_some();
                if !counted.at_work && counted.in_flight == 0 {
                    counts.uncount(session);
                }
            }
            (None, Some(owner)) => counts.count(session, owner, true, 0),
            (None, None) => {}
        }
    }

    /// Sessions counted against `console` now.
    #[cfg(test)]
    fn at_work(&self, console: &str) -> usize {
        self.lock().by_console.get(console).map_or(0, HashSet::len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Counts {
    /// A limit let a message of `console` through: its run of refusals ends.
    fn end_run(&mut self, console: &str, limit: Limit) {
        if self.runs.is_empty() {
            return;
        }
        if let Some(untold) = self.runs.remove(&(console.to_owned(), limit))
            && untold > 0
        {
            tracing::info!(
                console,
                ?limit,
                refused = untold + 1,
                "a run of messages refused by a console limit ended; only its first was logged"
            );
        }
    }

    fn count(&mut self, session: &str, console: &str, at_work: bool, in_flight: u32) {
        self.sessions.insert(
            session.to_owned(),
            Counted {
                console: console.to_owned(),
                at_work,
                in_flight,
            },
        );
        self.by_console
            .entry(console.to_owned())
            .or_default()
            .insert(session.to_owned());
    }

    fn uncount(&mut self, session: &str) {
        let Some(counted) = self.sessions.remove(session) else {
            return;
        };
        if let Some(sessions) = self.by_console.get_mut(&counted.console) {
            sessions.remove(session);
            if sessions.is_empty() {
                self.by_console.remove(&counted.console);
            }
        }
        self.end_run(&counted.console, Limit::Sessions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Rate {
        text.parse().unwrap()
    }

    #[test]
    fn rates_are_written_count_per_unit_with_a_burst() {
        assert_eq!(
            rate("30/min,burst=10"),
            Rate {
                count: 30,
                per: Duration::from_secs(60),
                burst: 10
            }
        );
        assert_eq!(
            rate("5/s"),
            Rate {
                count: 5,
                per: Duration::from_secs(1),
                burst: 5
            }
        );
        assert_eq!(rate(" 100 / h , burst = 20 ").burst, 20);
        assert_eq!(rate("30/min,burst=10").to_string(), "30/min,burst=10");
        assert_eq!(Rate::parse_setting("off"), Ok(None));
        for bad in [
            "",
            "30",
            "30/day",
            "x/min",
            "0/min",
            "3/min,burst=0",
            "3/min,10",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad:?}");
        }
        assert_eq!(
            ConsoleCaps::default().rate,
            Some(rate(DEFAULT_CONSOLE_RATE))
        );
    }

    #[test]
    fn a_console_has_at_most_so_many_sessions_at_work() {
        let caps = Caps::new(ConsoleCaps {
            max_sessions: Some(2),
            rate: None,
        });
        assert_eq!(caps.admit("alice", "s1"), Ok(()));
        // Admitted, not taken yet: a step of s1 before it does not uncount it.
        caps.settle("s1", None);
        assert_eq!(caps.at_work("alice"), 1);
        assert_eq!(caps.admit("alice", "s2"), Ok(()));
        // A session already counted takes more messages.
        assert_eq!(caps.admit("alice", "s1"), Ok(()));
        assert_eq!(
            caps.admit("alice", "s3"),
            Err(Refusal::Sessions {
                console: "alice".into(),
                max: 2
            })
        );
        // Another console is not affected.
        assert_eq!(caps.admit("bob", "s4"), Ok(()));
        // s1 takes its messages, works, and goes idle: room for another.
        caps.taken("s1");
        caps.settle("s1", Some("alice"));
        caps.taken("s1");
        assert_eq!(caps.at_work("alice"), 2);
        caps.settle("s1", None);
        assert_eq!(caps.at_work("alice"), 1);
        assert_eq!(caps.admit("alice", "s3"), Ok(()));
        // A session at work counts against the console that put it to work.
        caps.settle("s5", Some("carol"));
        caps.settle("s5", Some("alice"));
        assert_eq!((caps.at_work("carol"), caps.at_work("alice")), (1, 2));
    }

    #[test]
    fn a_console_sends_at_most_at_its_rate() {
        let caps = Caps::new(ConsoleCaps {
            max_sessions: None,
            rate: Some(rate("60/min,burst=3")),
        });
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(caps.spend("alice", t), Ok(()));
        }
        let refused = caps.spend("alice", t).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Message refused: console \"alice\" is sending faster than 60/min,burst=3 \
             messages. Wait a moment and send it again, or raise the limit \
             (arbiter-coordinator --console-rate, or ARBITER_CONSOLE_RATE). Until it slows \
             down, any more messages it sends are refused as well, and not logged one by one."
        );
        assert_eq!(caps.spend("bob", t), Ok(()));
        // One a second comes back.
        assert!(caps.spend("alice", t + Duration::from_millis(500)).is_err());
        assert_eq!(caps.spend("alice", t + Duration::from_secs(1)), Ok(()));
        // Never more than the burst, however long it waited.
        let later = t + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(caps.spend("alice", later), Ok(()));
        }
        assert!(caps.spend("alice", later).is_err());
    }

    /// The first refusal of a run is said, the others only counted, until
    /// the limit lets one through: a console sending as fast as it can puts
    /// one entry in the logs per message let through, not one per message.
    #[test]
    fn a_run_of_refusals_is_told_once() {
        let caps = Caps::new(ConsoleCaps {
            max_sessions: Some(1),
            rate: Some(rate("60/min,burst=2")),
        });
        let t = Instant::now();
        let told = |at: Instant| caps.spend("alice", at).map_err(|r| caps.tell(&r));
        assert_eq!(told(t), Ok(()));
        assert_eq!(told(t), Ok(()));
        assert_eq!(
            (0..1000).map(|_| told(t)).collect::<Vec<_>>(),
            std::iter::once(Err(true))
                .chain(std::iter::repeat_n(Err(false), 999))
                .collect::<Vec<_>>()
        );
        // Another console's run is its own.
        assert_eq!(caps.spend("bob", t), Ok(()));
        // A token later: one let through, and the next refusal is told again.
        let later = t + Duration::from_secs(1);
        assert_eq!(told(later), Ok(()));
        assert_eq!(told(later), Err(true));
        assert_eq!(told(later), Err(false));

        // The sessions limit: alice has one at work.
        assert_eq!(caps.admit("alice", "s1"), Ok(()));
        let sessions = |session: &str| caps.admit("alice", session).map_err(|r| caps.tell(&r));
        assert_eq!(sessions("s2"), Err(true));
        assert_eq!(sessions("s3"), Err(false));
        assert_eq!(sessions("s2"), Err(false));
        // A message to the session at work is no room: the run goes on.
        assert_eq!(sessions("s1"), Ok(()));
        assert_eq!(sessions("s4"), Err(false));
        // s1 goes idle: room again, and the run is over.
        caps.taken("s1");
        caps.taken("s1");
        caps.settle("s1", None);
        assert_eq!(sessions("s5"), Ok(()));
        assert_eq!(sessions("s6"), Err(true));
        // Runs of the two limits are apart.
        assert_eq!(
            caps.spend("alice", later).map_err(|r| caps.tell(&r)),
            Err(false)
        );
    }
}
