//! `arbiter-bench` itself at small counts, so that a phase cannot rot into
//! measuring nothing unnoticed: its saturation part once printed
//! `routed messages/s per coordinator: 0` for weeks after the coordinator
//! learned to hold an exchange that repeats itself, which every saturation
//! session does on purpose.

use std::time::Duration;

use arbiter_tests::bin;

/// The saturation part: 4 sessions whose Arbiter and Orchestrator answer
/// each other for 3 s, against the real coordinator and worker (run by the
/// bench binary) and a real nats-server. Messages are routed throughout
/// the window: a guard that held the sessions would leave it empty, and
/// the bench now fails then instead of printing 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_saturation_part_routes_messages_throughout_its_window() {
    let stdout = run_bench(
        &[
            "--phases",
            "saturation",
            "--saturation-sessions",
            "4",
            "--saturation-duration",
            "3",
            "--warmup",
            "1",
            // Fewer exchanges than the window holds, so sessions also end
            // and are replaced while it is measured.
            "--exchanges",
            "5",
        ],
        Duration::from_secs(120),
    )
    .await;
    let routed: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("routed messages/s per coordinator: "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no saturation figure in:\n{stdout}"));
    // 4 sessions of a zero-latency model route hundreds a second even in a
    // debug build on a loaded machine; a stalled run routes none.
    assert!(routed >= 20.0, "routed {routed} messages/s:\n{stdout}");
    let started: f64 = stdout
        .lines()
        .find_map(|l| {
            l.split("releases its Orchestrator and is replaced (")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no replacement rate in:\n{stdout}"));
    assert!(
        started > 0.0,
        "no session ended and was replaced:\n{stdout}"
    );
}

/// A figure after `prefix` on the line that holds it, as a number.
fn figure(stdout: &str, prefix: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.split(prefix).nth(1))
        .and_then(|rest| {
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit() && c != ',')
                .next()
        })
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{stdout}"))
}

/// The levels part at 20 sessions, 10 of them loaded, with 2 teams of 3
/// beside them: every Orchestrator is held and has parked before the load,
/// and once it is over a coordinator started after a kill -9 of the first
/// owns every session. The scale table prints the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_levels_part_parks_its_idle_orchestrators_and_times_a_takeover() {
    let stdout = run_bench(
        &[
            "--phases",
            "levels",
            "--levels",
            "20",
            "--level-active",
            "10",
            "--level-team-every",
            "10",
            "--level-park-after",
            "2",
            "--rate",
            "20",
            "--duration",
            "2",
            "--warmup",
            "1",
        ],
        Duration::from_secs(180),
    )
    .await;
    // 20 sessions and 2 team sessions; an Orchestrator each, 3 per team.
    assert_eq!(figure(&stdout, "Orchestrators held "), 26, "{stdout}");
    assert_eq!(figure(&stdout, ", parked "), 26, "{stdout}");
    assert_eq!(figure(&stdout, "a new one owns "), 22, "{stdout}");
    assert_eq!(figure(&stdout, " of its "), 22, "{stdout}");
    let all = figure(&stdout, "takeover: kill → new coordinator owns all");
    // The dead one's liveness key runs out 4 s after its last renewal,
    // which was at most 1.33 s before the kill: no takeover comes sooner
    // than 2.67 s, nor (with 22 sessions) much later.
    assert!((2..60).contains(&all), "takeover after {all} s:\n{stdout}");
}

/// Runs the bench with `args` (at most `limit`), and its report.
async fn run_bench(args: &[&str], limit: Duration) -> String {
    let mut command = tokio::process::Command::new(bin("arbiter-bench"));
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    let out = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("arbiter-bench {args:?} ran for over {limit:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "arbiter-bench failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The samples (`n`, the last column) of the latency row labelled `label`.
fn samples(stdout: &str, label: &str) -> u64 {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.split_whitespace().last())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no row `{label}` in:\n{stdout}"))
}

/// The handoff part at one session of 3 generations: each generation's
/// report carries a packet its successor gets, so there are two gaps to
/// time, and the packets and the Arbiter's growth are measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_part_times_each_generation_handed_on() {
    let stdout = run_bench(
        &[
            "--phases",
            "handoff",
            "--handoff-sessions",
            "1",
            "--handoff-generations",
            "3",
        ],
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        samples(&stdout, "report handed back → successor's 1st request"),
        2,
        "{stdout}"
    );
    let packet = figure(&stdout, "tokens carried per packet, past the Arbiter: ~");
    assert!(packet > 0, "{stdout}");
}

/// The teams part at two teams per size: every team of 3 and of 10 (and
/// the solo Orchestrator beside them) is timed to its last member's first
/// request, and then for a hop with the team live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_teams_part_times_every_team_it_starts() {
    let stdout = run_bench(
        &["--phases", "teams", "--team-sessions", "2"],
        Duration::from_secs(180),
    )
    .await;
    for label in [
        "summons → a solo Orchestrator's 1st request",
        "summons → all 3 members' 1st request",
        "summons → all 10 members' 1st request",
        "Arbiter → a solo Orchestrator (hop)",
        "Arbiter → one of 3 live members (hop)",
        "Arbiter → one of 10 live members (hop)",
    ] {
        assert_eq!(samples(&stdout, label), 2, "{label}:\n{stdout}");
    }
}
