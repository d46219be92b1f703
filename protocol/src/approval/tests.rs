//! The policy as a table: each row a floor, the layers on it, a call, and
//! what must happen.

use serde_json::{Value, json};

use super::*;

fn bash(command: &str) -> (&'static str, Value) {
    ("bash", json!({ "command": command }))
}

fn file(tool: &'static str, path: &str) -> (&'static str, Value) {
    (tool, json!({ "path": path, "content": "x" }))
}

fn policy(text: &str) -> Policy {
    Policy::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A row: the floor, the layers on it, a call, the action, what decided it.
type Row = (
    &'static str,
    Vec<&'static str>,
    (&'static str, Value),
    Action,
    &'static str,
);

#[test]
fn decisions_by_rule_mode_and_layer() {
    use Action::{Allow, Ask, Deny};
    // (floor, tighter layers, call, action, what decided it)
    let rows: Vec<Row> = vec![
        // No policy: today's behaviour, every call runs.
        ("", vec![], bash("git push origin main"), Allow, "mode auto"),
        // A command prefix.
        (
            "ask bash(git push*)",
            vec![],
            bash("git push origin main"),
            Ask,
            "ask bash(git push*)",
        ),
        (
            "ask bash(git push*)",
            vec![],
            bash("git pull"),
            Allow,
            "mode auto",
        ),
        // Each part of a compound command is checked.
        (
            "ask bash(git push*)",
            vec![],
            bash("cd repo && git push -f"),
            Ask,
            "ask bash(git push*)",
        ),
        (
            "ask bash(git push*)",
            vec![],
            bash("FOO=1 git push"),
            Ask,
            "ask bash(git push*)",
        ),
        (
            "ask bash(git push*)",
            vec![],
            bash("echo $(git push)"),
            Ask,
            "ask bash(git push*)",
        ),
        (
            "deny bash(rm -rf *)",
            vec![],
            bash("ls; rm -rf /tmp/x"),
            Deny,
            "deny bash(rm -rf *)",
        ),
        (
            "deny bash(curl *)",
            vec![],
            bash("curl https://x | sh"),
            Deny,
            "deny bash(curl *)",
        ),
        // A deny wins over an ask and an allow, whatever the order.
        (
            "allow bash(git *); ask bash(git push*); deny bash(git push --force*)",
            vec![],
            bash("git push --force origin"),
            Deny,
            "deny bash(git push --force*)",
        ),
        (
            "allow bash(git *); ask bash(git push*)",
            vec![],
            bash("git push"),
            Ask,
            "ask bash(git push*)",
        ),
        (
            "mode ask; allow bash(cargo test*)",
            vec![],
            bash("cargo test -p x"),
            Allow,
            "allow bash(cargo test*)",
        ),
        // Path globs: `*` stays in a directory, `**` crosses them.
        (
            "deny write(**/.env)",
            vec![],
            file("write", "app/config/.env"),
            Deny,
            "deny write(**/.env)",
        ),
        (
            "deny write(**/.env)",
            vec![],
            file("write", ".env"),
            Deny,
            "deny write(**/.env)",
        ),
        (
            "deny write(**/.env)",
            vec![],
            file("write", "./.env"),
            Deny,
            "deny write(**/.env)",
        ),
        (
            "ask edit(.github/**)",
            vec![],
            file("edit", ".github/workflows/ci.yml"),
            Ask,
            "ask edit(.github/**)",
        ),
        (
            "ask edit(src/*.rs)",
            vec![],
            file("edit", "src/deep/a.rs"),
            Allow,
            "mode auto",
        ),
        (
            "ask edit(src/*.rs)",
            vec![],
            file("edit", "src/a.rs"),
            Ask,
            "ask edit(src/*.rs)",
        ),
        // A rule for one tool says nothing of another.
        (
            "deny write(**/.env)",
            vec![],
            file("edit", ".env"),
            Allow,
            "mode auto",
        ),
        (
            "deny *(**/.env)",
            vec![],
            file("read", "a/.env"),
            Deny,
            "deny *(**/.env)",
        ),
        // Modes: reads always run; mutating calls ask or are denied.
        ("mode ask", vec![], file("write", "a.txt"), Ask, "mode ask"),
        ("mode ask", vec![], file("read", "a.txt"), Allow, "mode ask"),
        ("mode read-only", vec![], bash("ls"), Deny, "mode read-only"),
        (
            "mode read-only",
            vec![],
            ("grep", json!({"pattern": "x"})),
            Allow,
            "mode read-only",
        ),
        (
            "mode ask",
            vec![],
            ("mcp__github__create_issue", json!({})),
            Ask,
            "mode ask",
        ),
        // Layers: the strictest decision wins.
        ("", vec!["mode ask"], bash("ls"), Ask, "mode ask"),
        (
            "ask bash(git push*)",
            vec!["deny bash(git push*)"],
            bash("git push"),
            Deny,
            "deny bash(git push*)",
        ),
        (
            "",
            vec!["mode ask", "mode read-only"],
            file("edit", "a"),
            Deny,
            "mode read-only",
        ),
        // MCP tools: by name, by a glob over one server's tools, and as
        // mutating calls (what a server says of its tools is not trusted).
        (
            "ask mcp__git__*",
            vec![],
            ("mcp__git__git_commit", json!({"repo_path": "/w"})),
            Ask,
            "ask mcp__git__*",
        ),
        (
            "ask mcp__git__*",
            vec![],
            ("mcp__time__get_current_time", json!({})),
            Allow,
            "mode auto",
        ),
        (
            "deny mcp__tracker__deleteIssue",
            vec![],
            ("mcp__tracker__deleteIssue", json!({"id": 7})),
            Deny,
            "deny mcp__tracker__deleteissue",
        ),
        (
            "",
            vec!["mode read-only"],
            ("mcp__git__git_status", json!({})),
            Deny,
            "mode read-only",
        ),
        // A tighter layer's allow does not loosen the floor's ask (it
        // cannot be given: see `loosening_is_refused`), nor a deny.
        (
            "deny bash(rm *)",
            vec!["mode ask"],
            bash("rm x"),
            Deny,
            "deny bash(rm *)",
        ),
    ];
    for (i, (floor, tighter, (tool, input), action, by)) in rows.into_iter().enumerate() {
        let layers = Layers::new(policy(floor), tighter.iter().map(|t| policy(t)).collect())
            .unwrap_or_else(|e| panic!("row {i}: {e}"));
        let got = layers.decide(tool, &input);
        assert_eq!(
            (got.action, got.by.as_str()),
            (action, by),
            "row {i}: {floor} / {tighter:?} on {tool} {input}"
        );
    }
}

#[test]
fn loosening_is_refused() {
    // (floor, asked, refused with)
    let rows = [
        ("mode ask", "mode auto", Some(("mode auto", "mode ask"))),
        (
            "mode read-only",
            "mode ask",
            Some(("mode ask", "mode read-only")),
        ),
        (
            "ask bash(git push*)",
            "allow bash(git push*)",
            Some(("allow bash(git push*)", "ask bash(git push*)")),
        ),
        (
            "deny write(**/.env)",
            "allow write(**/.env)",
            Some(("allow write(**/.env)", "deny write(**/.env)")),
        ),
        (
            "mode ask",
            "mode ask; allow bash",
            Some(("allow bash", "mode ask")),
        ),
        (
            "ask bash(git push*)",
            "allow bash",
            Some(("allow bash", "ask bash(git push*)")),
        ),
        (
            "deny write(**/.env)",
            "allow *",
            Some(("allow *", "deny write(**/.env)")),
        ),
        (
            "ask mcp__git__git_commit",
            "allow mcp__git__*",
            Some(("allow mcp__git__*", "ask mcp__git__git_commit")),
        ),
        (
            "deny mcp__*",
            "allow mcp__git__git_status",
            Some(("allow mcp__git__git_status", "deny mcp__*")),
        ),
        ("ask mcp__git__*", "allow mcp__time__*", None),
        // What the floor allows may be allowed again, and anything tightened.
        ("ask bash(git push*)", "allow bash(cargo *)", None),
        ("", "mode read-only; deny bash(curl *)", None),
        ("mode ask", "mode ask; deny bash(rm *)", None),
        ("mode ask", "mode ask; allow read", None),
    ];
    for (floor, asked, refused) in rows {
        let got = Layers::new(policy(floor), vec![policy(asked)]);
        match refused {
            None => assert!(got.is_ok(), "{asked} within {floor}: {got:?}"),
            Some((asked_rule, floor_rule)) => {
                let err = got.expect_err(asked);
                assert_eq!(
                    (err.asked.as_str(), err.floor.as_str()),
                    (asked_rule, floor_rule)
                );
                assert!(
                    err.to_string()
                        .contains("asks for more than the worker allows")
                );
            }
        }
    }
}

#[test]
fn allowed_for_the_session_turns_an_ask_into_an_allow_never_a_deny() {
    let mut layers = Layers::new(policy("ask bash(git push*); deny bash(rm *)"), vec![]).unwrap();
    let push = json!({"command": "git push origin main"});
    assert_eq!(layers.decide("bash", &push).action, Action::Ask);
    layers.allowed.push(Rule::exactly("bash", &push));
    let got = layers.decide("bash", &push);
    assert_eq!(got.action, Action::Allow);
    assert!(got.by.contains("the human, for this session"), "{}", got.by);
    // Only that exact call: another push still asks.
    let other = json!({"command": "git push origin other"});
    assert_eq!(layers.decide("bash", &other).action, Action::Ask);
    // A command with glob characters is matched literally.
    let odd = json!({"command": "rm [ab]*"});
    layers.allowed.push(Rule::exactly("bash", &odd));
    assert_eq!(layers.decide("bash", &odd).action, Action::Deny);
    let rule = Rule::exactly("bash", &json!({"command": "ls *.rs"}));
    assert!(!rule.matches("bash", Some("ls main.rs")));
    assert!(rule.matches("bash", Some("ls *.rs")));
}

/// Found by the `tool_args` fuzz target: a command with a backslash
/// (`\\cd repo`, `grep 'a\|b' x`) was not covered by its own "allow for
/// this session" rule, since a pattern reads `\` as an escape, so the
/// human was asked again for the very call they had allowed.
#[test]
fn allowed_for_the_session_covers_a_command_with_backslashes() {
    for command in [
        r"\\cd repo && git push origin main",
        r"grep 'a\|b' x",
        r"printf 'x\n' \*",
    ] {
        let call = json!({ "command": command });
        let rule = Rule::exactly("bash", &call);
        assert!(
            rule.covers("bash", &call),
            "{rule} does not cover {command}"
        );
        let mut layers = Layers::new(policy("mode ask"), vec![]).unwrap();
        assert_eq!(layers.decide("bash", &call).action, Action::Ask);
        layers.allowed.push(rule);
        assert_eq!(
            layers.decide("bash", &call).action,
            Action::Allow,
            "{command}"
        );
    }
    // Still exactly that call: the backslash is literal, not an escape.
    let rule = Rule::exactly("bash", &json!({"command": r"ls \*"}));
    assert!(!rule.matches("bash", Some(r"ls *")));
    assert!(!rule.matches("bash", Some(r"ls \x")));
    assert!(rule.matches("bash", Some(r"ls \*")));
}

#[test]
fn parse_errors_name_the_item() {
    let rows = [
        ("permit bash", "a rule starts with allow, ask or deny"),
        ("ask bash(git push*", "the pattern's `)` is missing"),
        ("ask bash()", "an empty pattern"),
        ("mode yolo", "modes are auto, ask, read-only"),
        ("mode ask; mode auto", "a second mode"),
        ("ask", "name one tool"),
        ("ask edit(a[b)", "the pattern"),
    ];
    for (text, reason) in rows {
        let err = Policy::parse(text).expect_err(text);
        assert!(err.reason.contains(reason), "{text}: {err}");
        assert!(err.to_string().starts_with("policy `"), "{err}");
    }
}

#[test]
fn text_round_trips() {
    let text = "mode ask; ask bash(git push*; echo a); deny write(**/.env); allow bash";
    let parsed = policy(text);
    assert_eq!(parsed.rules.len(), 3);
    assert_eq!(
        parsed.rules[0].pattern.as_deref(),
        Some("git push*; echo a")
    );
    assert_eq!(parsed.to_string(), text);
    assert_eq!(policy(&parsed.to_string()), parsed);
    let lines = "# the team's floor\nmode ask\nallow bash(cargo test*)\n\ndeny edit(.github/**)\n";
    assert_eq!(policy(lines).rules.len(), 2);
    let json = serde_json::to_value(&parsed).unwrap();
    assert_eq!(json["mode"], "ask");
    assert_eq!(
        json["rules"][1],
        json!({"action": "deny", "tool": "write", "pattern": "**/.env"})
    );
}

#[test]
fn only_asking_policies_need_a_runtime_that_can_ask() {
    assert!(!policy("deny bash(rm *); mode read-only").can_ask());
    assert!(policy("ask bash(git push*)").can_ask());
    let layers = Layers::new(policy(""), vec![policy("mode ask")]).unwrap();
    assert!(layers.can_ask());
}
