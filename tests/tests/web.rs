//! The web console in a real browser: the real `arbiter-web` binary on its
//! own `web` credential, against a secure system (TLS, a credential per
//! role) with the mock model, driven through a headless chromium over
//! WebDriver. What a user sees in the page is what these tests read.

use crate::common;

use std::time::Duration;

use arbiter_protocol::Policy;
use arbiter_tests::browser::screenshot_dir;
use arbiter_tests::{Browser, Gate, MockReply, WebConsole, bin, eventually};
use common::*;
use fantoccini::Locator;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// Characters of one entry a page shows (`arbiter_web::view::MAX_TEXT`).
fn arbiter_web_max_text() -> usize {
    16_384
}

async fn secure_system() -> System {
    System::start_with(Options {
        secure: true,
        ..Default::default()
    })
    .await
}

async fn web(sys: &System) -> WebConsole {
    WebConsole::start(
        &bin("arbiter-web"),
        &sys.nats_env("web"),
        &[],
        process_log("arbiter-web"),
    )
    .await
}

/// A browser signed in to `web` (the printed URL, once), on `path`.
async fn signed_in(web: &WebConsole, path: &str) -> Browser {
    let browser = Browser::start().await;
    browser.client.goto(&web.sign_in).await.unwrap();
    // The token is traded for the cookie and leaves the address bar.
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(
        url.as_str(),
        format!("{}/", web.base),
        "redirected without the token"
    );
    browser
        .client
        .goto(&format!("{}{path}", web.base))
        .await
        .unwrap();
    browser
}

/// Types `text` into the page's input box and presses Enter.
async fn type_line(browser: &Browser, text: &str) {
    let input = browser.client.find(Locator::Css("#text")).await.unwrap();
    input.send_keys(text).await.unwrap();
    input.send_keys("\u{E007}").await.unwrap(); // WebDriver's Enter key
}

/// Whether `wanted` appear in `lines` in this order (others may come between).
fn in_order(lines: &[String], wanted: &[&str]) -> bool {
    let mut it = lines.iter();
    wanted
        .iter()
        .all(|w| it.by_ref().any(|line| line.starts_with(w)))
}

/// The seed's flow typed into the browser: every line arrives live, in
/// order, under the right speaker; the evidence line shows; the status
/// area shows Orchestrator I at work, then the Arbiter awaiting the human.
/// Screenshots of the session page and the sessions page are written to
/// `target/screenshots/web/` (or `ARBITER_SCREENSHOTS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_flow_typed_into_the_browser_appears_live_in_order() {
    let sys = secure_system().await;
    let s = "s-web-seed";
    let brief = "Brief: write hello.txt saying hello.";
    let arb = arbiter_lane("Write a greeting");
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(
        &orch_lane(brief),
        MockReply::tool_use("write", json!({"path": "hello.txt", "content": "hello\n"})),
    );
    // Held, so the page can be seen with Orchestrator I at work.
    let hold = Gate::new();
    sys.mock.push(
        &orch_lane(brief),
        orch(true, "Wrote hello.txt.").gated(hold.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    let web = web(&sys).await;
    let browser = signed_in(&web, &format!("/s/{s}")).await;
    browser
        .wait_texts("#status", "the idle status", WAIT, |t| {
            t.iter().any(|t| t.contains("Awaiting your command."))
        })
        .await;

    type_line(&browser, "Write a greeting").await;
    browser
        .wait_texts("#status", "Orchestrator I at work", WAIT, |t| {
            t.iter()
                .any(|t| t.contains("Orchestrator I") && t.contains("working"))
        })
        .await;
    let dir = screenshot_dir();
    let at_work = browser.screenshot(&dir, "session-at-work").await;
    hold.open();
    let lines = browser
        .wait_texts("#log li", "the whole flow", WAIT, |lines| {
            in_order(
                lines,
                &[
                    "You: Write a greeting",
                    "· Orchestrator I summoned.",
                    "Arbiter → I: Brief: write hello.txt saying hello.",
                    "Orchestrator I: Wrote hello.txt.",
                    "· Evidence: 1 tool call (write 1), 1 file changed (created: hello.txt)",
                    "· Orchestrator I released.",
                    "Arbiter: It is done.",
                ],
            )
        })
        .await;
    // Each line once: the stream and the page do not repeat one another.
    let you = lines
        .iter()
        .filter(|l| l.starts_with("You: Write a greeting"))
        .count();
    assert_eq!(you, 1, "{lines:#?}");
    browser
        .wait_texts(
            "#status",
            "the Arbiter awaiting the human again",
            WAIT,
            |t| t.iter().any(|t| t.contains("Awaiting your command.")),
        )
        .await;
    // A reload shows the same conversation, rendered on the server.
    browser.client.refresh().await.unwrap();
    let reloaded = browser.texts("#log li").await;
    assert!(
        in_order(
            &reloaded,
            &["You: Write a greeting", "Arbiter: It is done."]
        ),
        "{reloaded:#?}"
    );
    let session_page = browser.screenshot(&dir, "session").await;

    browser
        .client
        .goto(&format!("{}/", web.base))
        .await
        .unwrap();
    let rows = browser
        .wait_texts(
            "#sessions tbody tr",
            "the session in the list",
            WAIT,
            |rows| rows.iter().any(|r| r.contains(s) && r.contains("idle")),
        )
        .await;
    assert!(rows.iter().any(|r| r.contains("cost unknown")), "{rows:#?}");
    let sessions_page = browser.screenshot(&dir, "sessions").await;
    for shot in [&at_work, &session_page, &sessions_page] {
        let size = std::fs::metadata(shot).map(|m| m.len()).unwrap_or(0);
        assert!(
            size > 5_000,
            "{} is a real picture ({size} bytes)",
            shot.display()
        );
    }
    eprintln!("screenshots in {}", dir.display());

    // Fleet and metrics render from the live system.
    browser
        .client
        .goto(&format!("{}/fleet", web.base))
        .await
        .unwrap();
    let fleet = browser.texts("#fleet tbody tr").await;
    assert!(
        fleet
            .iter()
            .any(|r| r.contains("worker-0") && r.contains("default")),
        "{fleet:#?}"
    );
    browser
        .client
        .goto(&format!("{}/metrics", web.base))
        .await
        .unwrap();
    let charts = browser
        .client
        .find_all(Locator::Css(".chart svg"))
        .await
        .unwrap();
    assert_eq!(charts.len(), 2);
    browser.close().await;
}

/// A model's words holding markup and terminal escapes: nothing runs (a
/// marker the payloads would set stays unset), the text shows literally,
/// and a very long line is cut with a note of how much was left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_a_models_words_is_shown_as_text_and_never_runs() {
    let sys = secure_system().await;
    let s = "s-web-hostile";
    let payload = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">\"><svg onload=window.__pwned=3> <a href=\"javascript:window.__pwned=4\">click</a> \u{1b}[31mred\u{1b}[0m";
    sys.mock.push(
        &arbiter_lane("Say something"),
        arbiter("address_human", payload),
    );
    let web = web(&sys).await;
    let browser = signed_in(&web, &format!("/s/{s}")).await;
    type_line(&browser, "Say something").await;
    let lines = browser
        .wait_texts("#log li", "the hostile words", WAIT, |l| {
            l.iter().any(|l| l.contains("window.__pwned = 1"))
        })
        .await;
    let shown = lines.iter().find(|l| l.starts_with("Arbiter: ")).unwrap();
    assert!(
        shown.contains("<script>window.__pwned = 1</script>"),
        "{shown}"
    );
    assert!(shown.contains("<img src=x onerror="), "{shown}");
    assert!(
        shown.contains("\\x1b[31mred"),
        "the escape shown, not acted on: {shown}"
    );
    // Nothing of it became an element.
    for css in ["#log script", "#log img", "#log svg", "#log a"] {
        let found = browser.client.find_all(Locator::Css(css)).await.unwrap();
        assert!(found.is_empty(), "{css} in the page");
    }
    let pwned = browser
        .client
        .execute("return window.__pwned === undefined;", vec![])
        .await
        .unwrap();
    assert_eq!(pwned, json!(true), "no payload ran (live)");

    // The same after a reload, rendered on the server.
    browser.client.refresh().await.unwrap();
    let pwned = browser
        .client
        .execute("return window.__pwned === undefined;", vec![])
        .await
        .unwrap();
    assert_eq!(pwned, json!(true), "no payload ran (rendered)");
    let reloaded = browser.texts("#log li").await;
    assert!(
        reloaded
            .iter()
            .any(|l| l.contains("<script>window.__pwned = 1</script>")),
        "{reloaded:#?}"
    );

    // The sessions page quotes the words the session waits on: as text too.
    browser
        .client
        .goto(&format!("{}/", web.base))
        .await
        .unwrap();
    let rows = browser
        .wait_texts(
            "#sessions tbody tr",
            "the session waiting for its human",
            WAIT,
            |rows| rows.iter().any(|r| r.contains("waits for your word")),
        )
        .await;
    assert!(
        rows.iter()
            .any(|r| r.contains("The Arbiter wrote to you: <script>window.__pwned = 1")),
        "{rows:#?}"
    );
    let pwned = browser
        .client
        .execute("return window.__pwned === undefined;", vec![])
        .await
        .unwrap();
    assert_eq!(pwned, json!(true), "no payload ran (sessions page)");
    browser
        .client
        .goto(&format!("{}/s/{s}", web.base))
        .await
        .unwrap();

    // 200 KB that does not repeat itself (the model client stops a reply that does).
    let mut long = String::new();
    for i in 0.. {
        if long.len() >= 200_000 {
            break;
        }
        long.push_str(&format!("w{i} "));
    }
    long.push_str("END");
    let left = long.chars().count() - arbiter_web_max_text();
    sys.mock.push(
        &arbiter_lane("Say something"),
        arbiter("address_human", &long),
    );
    type_line(&browser, "Say something more").await;
    let lines = browser
        .wait_texts("#log li", "the long line, cut", WAIT, |l| {
            l.iter().any(|l| l.contains("more characters"))
        })
        .await;
    let cut = lines
        .iter()
        .find(|l| l.contains("more characters"))
        .unwrap();
    assert!(
        cut.len() < 20_000,
        "cut to a page's measure: {} bytes",
        cut.len()
    );
    assert!(
        cut.contains(&format!("{left} more characters")),
        "{}",
        &cut[cut.len() - 120..]
    );
    assert!(!cut.contains("END"));
    browser.close().await;
}

/// Without the token nothing answers but 401: every page, the streams,
/// the forms, the script. The token signs in once with an HttpOnly,
/// SameSite=Strict cookie; a change without the login's CSRF token is
/// refused with 403 and sends nothing; the pages carry a strict CSP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_every_page_is_401_and_a_change_needs_the_csrf_token() {
    let sys = secure_system().await;
    let s = "s-web-gate";
    let web = web(&sys).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = |path: &str| format!("{}{path}", web.base);
    for path in [
        "/",
        "/events",
        "/approvals",
        "/fleet",
        "/metrics",
        "/static/web.js",
        &format!("/s/{s}"),
        &format!("/s/{s}/events"),
    ] {
        let r = http.get(url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "GET {path}");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        let body = r.text().await.unwrap();
        assert!(
            !body.contains(&web.token),
            "the 401 page does not hold the token"
        );
    }
    for path in [
        format!("/s/{s}/send"),
        format!("/s/{s}/stop"),
        "/new".to_owned(),
    ] {
        let r = http
            .post(url(&path))
            .form(&[("text", "hello")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "POST {path}");
    }
    let wrong = http.get(url("/?token=not-the-token")).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let cookie_header = wrong.headers().get("set-cookie");
    assert!(cookie_header.is_none(), "a wrong token gets no cookie");

    // The token: a cookie, and the same address without the token.
    let r = http
        .get(url(&format!("/s/{s}?token={}", web.token)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], format!("/s/{s}"));
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = http
        .get(url(&format!("/s/{s}")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"),
    ] {
        assert_eq!(page.headers()[name], value, "{name}");
    }
    let html = page.text().await.unwrap();
    assert!(!html.contains(&web.token), "no page holds the access token");
    let csrf = html
        .split("name=\"csrf\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    assert_eq!(csrf.len(), 43);
    // No inline script at all: every script is the server's own file.
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script src=\"/static/web.js\" defer></script>"));

    let log = sys.watch_log(s).await;
    for form in [
        vec![("text", "forged")],
        vec![("text", "forged"), ("csrf", "wrong")],
    ] {
        let r = http
            .post(url(&format!("/s/{s}/send")))
            .header("cookie", &cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{form:?}");
        let why = r.text().await.unwrap();
        assert!(
            why.contains("CSRF token is missing or not this login's"),
            "{why}"
        );
    }
    // Another site's page, even with the right token, is refused too.
    let r = http
        .post(url(&format!("/s/{s}/send")))
        .header("cookie", &cookie)
        .header("sec-fetch-site", "cross-site")
        .form(&[("text", "forged"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // With it, the line goes: the log has it under the web credential's name.
    sys.mock.push(
        &arbiter_lane("The real one"),
        arbiter("address_human", "Heard."),
    );
    let r = http
        .post(url(&format!("/s/{s}/send")))
        .header("cookie", &cookie)
        .header("accept", "application/json")
        .form(&[("text", "The real one"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    sys.settled(s, 2).await;
    let humans: Vec<String> = log
        .entries()
        .iter()
        .filter_map(|e| match &e.body {
            arbiter_protocol::LogBody::Human(h) => Some(h.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        humans,
        vec!["The real one".to_owned()],
        "nothing forged got through"
    );

    // In the browser the cookie is out of a script's reach.
    let browser = signed_in(&web, &format!("/s/{s}")).await;
    let seen = browser
        .client
        .execute("return document.cookie;", vec![])
        .await
        .unwrap();
    assert_eq!(seen, json!(""), "HttpOnly: no script reads the login");
    browser.close().await;
}

/// The connections `arbiter-web` has open on the server, counted through
/// the system account (`$SYS.REQ.SERVER.PING.CONNZ`).
async fn web_connections(sys: &System) -> usize {
    let admin = sys.admin.as_ref().unwrap().path();
    let bundle = admin.join("creds").join("admin");
    let options = arbiter_bus::NatsOptions {
        creds: Some(admin.join("keys").join("system.creds")),
        tls_ca: Some(bundle.join("ca.pem")),
        tls_cert: Some(bundle.join("cert.pem")),
        tls_key: Some(bundle.join("key.pem")),
        ..arbiter_bus::NatsOptions::url(sys.nats.url())
    };
    let conn = arbiter_bus::connect_with(&options, "test-sys", arbiter_bus::Reach::FailFast)
        .await
        .unwrap();
    let reply = conn
        .client
        .request("$SYS.REQ.SERVER.PING.CONNZ", r#"{"limit": 1024}"#.into())
        .await
        .unwrap();
    let connz: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    connz["data"]["connections"].as_array().map_or(0, |c| {
        c.iter().filter(|c| c["name"] == "arbiter-web").count()
    })
}

/// Two browsers on one session both show a line sent from a terminal
/// console; once both tabs are closed the web process keeps nothing of the
/// session on the server (its connection for the session is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_see_a_line_from_a_terminal_and_closed_tabs_leave_nothing_behind() {
    let sys = secure_system().await;
    let s = "s-web-two";
    sys.mock.push(
        &arbiter_lane("Hello from the terminal"),
        arbiter("address_human", "Both of you hear me."),
    );
    let web = web(&sys).await;
    let one = signed_in(&web, &format!("/s/{s}")).await;
    let two = signed_in(&web, &format!("/s/{s}")).await;
    for b in [&one, &two] {
        b.wait_texts("#status", "the idle status", WAIT, |t| {
            t.iter().any(|t| t.contains("Awaiting your command."))
        })
        .await;
    }
    // The web's own connection and one for the watched session.
    eventually(WAIT, "two arbiter-web connections", || async {
        (web_connections(&sys).await == 2).then_some(())
    })
    .await;

    sys.send(s, "Hello from the terminal").await;
    for b in [&one, &two] {
        b.wait_texts("#log li", "the terminal's line and the answer", WAIT, |l| {
            in_order(
                l,
                &[
                    "You: Hello from the terminal",
                    "Arbiter: Both of you hear me.",
                ],
            )
        })
        .await;
    }
    one.close().await;
    two.close().await;
    eventually(WAIT, "only the web's own connection left", || async {
        (web_connections(&sys).await == 1).then_some(())
    })
    .await;
}

/// A push under `ask bash(git push*)`: the approval shows in the browser
/// with its buttons; Allow, clicked there, runs the call once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_shown_in_the_browser_and_allowed_there_runs_once() {
    let mut sys = System::start_with(Options {
        secure: true,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-0", 2, 200_000);
    config.policy = Policy::parse("ask bash(git push*)").unwrap();
    sys.spawn_worker_with(config);
    let s = "s-web-approve";
    let brief = "Push the branch.";
    let push = "git push origin main 2>/dev/null; echo ran >> pushed.log";
    sys.mock.push(
        &arbiter_lane("Push it"),
        arbiter("summon_orchestrator", brief),
    );
    sys.mock.push(
        &orch_lane(brief),
        MockReply::tool_use("bash", json!({ "command": push })),
    );
    sys.mock.push(&orch_lane(brief), orch(true, "Pushed."));
    sys.mock.push(
        &arbiter_lane("Push it"),
        arbiter("address_human", "Pushed."),
    );
    let web = web(&sys).await;
    let browser = signed_in(&web, &format!("/s/{s}")).await;
    type_line(&browser, "Push it").await;
    let waiting = browser
        .wait_texts("#approvals form", "the approval", WAIT, |a| !a.is_empty())
        .await;
    assert!(
        waiting[0].contains("Approval 1: Orchestrator I asks to run bash: git push origin main"),
        "{waiting:#?}"
    );
    let runs = || {
        std::fs::read_to_string(sys.workspace(s).join("pushed.log"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    assert_eq!(runs(), 0, "nothing runs before the word");
    browser
        .client
        .find(Locator::Css("#approvals button[value=allow]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait_texts("#log li", "the report", WAIT, |l| {
            l.iter().any(|l| l.starts_with("Orchestrator I: Pushed."))
        })
        .await;
    browser
        .wait_texts("#approvals form", "the approval gone", WAIT, |a| {
            a.is_empty()
        })
        .await;
    assert_eq!(runs(), 1, "the call ran once");
    let answered = browser.texts("#log li").await;
    assert!(
        answered
            .iter()
            .any(|l| l.contains("Approval 1: allowed once by") && l.contains("web")),
        "{answered:#?}"
    );
    browser.close().await;
}

/// HTTPS with a certificate `arbiter-admin web-cert` issued: a client that
/// trusts the deployment's CA signs in; the cookie is `Secure` and
/// host-only (`__Host-`), the server says HSTS, plain HTTP gets no page.
/// Neither the token nor any credential reaches its log. Plain HTTP beyond
/// loopback is refused at start with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_certificate_from_arbiter_admin_and_no_secret_in_the_log() {
    let sys = secure_system().await;
    let admin = sys.admin.as_ref().unwrap().path().to_owned();
    let dir = arbiter_admin::issue_web_cert(
        &admin,
        &["127.0.0.1".to_owned(), "localhost".to_owned()],
        30,
    )
    .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("web.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let web = WebConsole::start(
        &bin("arbiter-web"),
        &sys.nats_env("web"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        log.into(),
    )
    .await;
    assert!(web.base.starts_with("https://127.0.0.1:"), "{}", web.base);
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.pem")).unwrap()).unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = https.get(format!("{}/", web.base)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = https.get(&web.sign_in).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("__Host-arbiter_web="), "{set}");
    assert!(
        set.contains("; Secure") && set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(
        r.headers()["strict-transport-security"]
            .to_str()
            .unwrap()
            .contains("max-age=")
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = https
        .get(format!("{}/fleet", web.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    // The same port in plain HTTP: no page.
    let plain = web.base.replacen("https://", "http://", 1);
    let r = reqwest::get(format!("{plain}/")).await;
    assert!(
        r.map(|r| r.status() != 200).unwrap_or(true),
        "no page over plain HTTP"
    );
    // Bearer for a script.
    let r = https
        .get(format!("{}/approvals", web.base))
        .header("authorization", format!("Bearer {}", web.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let token = web.token.clone();
    drop(web);

    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(logged.contains("serving"), "{logged}");
    assert!(!logged.contains(&token), "the access token in the log");
    let secrets = [
        std::fs::read_to_string(admin.join("creds").join("web").join("nats.creds")).unwrap(),
        std::fs::read_to_string(admin.join("creds").join("web").join("key.pem")).unwrap(),
    ];
    for secret in &secrets {
        for line in secret
            .lines()
            .filter(|l| l.len() > 20 && !l.starts_with("-----"))
        {
            assert!(!logged.contains(line), "a credential line in the log");
        }
    }

    // Beyond loopback without TLS: refused, saying why.
    let out = tokio::process::Command::new(bin("arbiter-web"))
        .envs(sys.nats_env("web"))
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("refusing to serve plain HTTP on 0.0.0.0:0"),
        "{said}"
    );
}
