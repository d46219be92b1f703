//! The rules, each a row of the table. The kit plays the coordinator: it
//! summons, speaks, releases and cancels; and the model: each Orchestrator's
//! replies are queued on the mock under its brief.

use std::time::Duration;

use arbiter_protocol::subjects;
use arbiter_tests::MockReply;
use serde_json::{Value, json};

use crate::kit::{Kit, Out, POOL, SCHEMA_REPAIRS, until};

/// How long a worker has for anything it should do promptly.
const PROMPT: Duration = Duration::from_secs(15);

pub struct Row {
    pub rule: &'static str,
    pub outcome: Result<(), String>,
}

struct Rows(Vec<Row>);

impl Rows {
    fn add(&mut self, rule: &'static str, outcome: Result<(), String>) {
        self.0.push(Row { rule, outcome });
    }
}

/// An Orchestrator the kit summoned.
struct Orch {
    id: String,
    /// Its session (the summons' `session_id`).
    session: String,
    brief: String,
    summons_seq: u64,
    inputs: u64,
}

fn question(text: &str) -> MockReply {
    MockReply::json(&json!({"expects_response": true, "message": text}))
}

fn note(text: &str) -> MockReply {
    MockReply::json(&json!({"expects_response": false, "message": text}))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

impl Kit {
    async fn summon(&self, name: &str) -> Orch {
        let id = uuid::Uuid::now_v7().to_string();
        let brief = format!("Conformance brief {name} ({id}).");
        let session = format!("conf-{name}");
        let summons = json!({"v":1,"session_id":session,"orch_id":id,"number":1,
            "brief":brief,"workspace":null,"pool":POOL,"summoned_at":now()});
        let summons_seq = self
            .publish(subjects::summon(POOL), &id, summons.to_string().into())
            .await;
        Orch {
            id,
            session,
            brief,
            summons_seq,
            inputs: 0,
        }
    }

    /// Input `seq`, as a coordinator sends it: the log entry that is the
    /// input (protocol v3) and, until an output of the Orchestrator says
    /// `session_inputs`, the bare input on `orch.<id>.in` (v2) too. So a
    /// worker that says it reads the log entries and reads `.in` instead
    /// gets no input after its first output, as it would in production.
    async fn input(&self, orch: &Orch, seq: u64, message: &str) {
        let entry = json!({"v":3,"session_id":orch.session,"seq":seq,"at":now(),
            "body":{"type":"arbiter_to_orchestrator","number":1,"orch_id":orch.id,
                "text":message,"input_seq":seq}});
        self.publish(
            subjects::session_input(&orch.session, &orch.id, seq),
            &format!("{}:log:{}:{seq}", orch.session, orch.id),
            entry.to_string().into(),
        )
        .await;
        let reads_the_log = self
            .outs_of(&orch.id)
            .iter()
            .any(|o| o.body["session_inputs"] == true);
        if reads_the_log {
            return;
        }
        let input = json!({"v":1,"session_id":"conf","orch_id":orch.id,"seq":seq,
            "message":message,"sent_at":now()});
        self.publish(
            subjects::orch_in(&orch.id),
            &format!("{}:in:{seq}", orch.id),
            input.to_string().into(),
        )
        .await;
    }

    async fn control(&self, orch: &Orch, action: &str) {
        let ctl = json!({"v":1,"orch_id":orch.id,"action":action,"sent_at":now()});
        self.publish(
            subjects::orch_ctl(&orch.id),
            &format!("{}:ctl:{action}", orch.id),
            ctl.to_string().into(),
        )
        .await;
    }

    /// Waits for output `seq` of `orch`.
    async fn out(&self, orch: &Orch, seq: u64) -> Result<Out, String> {
        until(PROMPT, || async {
            self.outs_of(&orch.id).into_iter().find(|o| o.seq == seq)
        })
        .await
        .ok_or_else(|| format!("no output seq {seq} on orch.<id>.out within {PROMPT:?}"))
    }

    /// Waits for a status of `orch` with `state`.
    async fn status(&self, orch: &Orch, state: &str) -> Result<Value, String> {
        until(PROMPT, || async {
            self.statuses_of(&orch.id)
                .into_iter()
                .rev()
                .find(|s| s["state"] == state)
        })
        .await
        .ok_or_else(|| format!("no status \"{state}\" within {PROMPT:?}"))
    }

    /// Waits until the model has had `n` requests for `orch`.
    async fn requests(&self, orch: &Orch, n: usize) -> Result<Vec<Value>, String> {
        until(PROMPT, || async {
            let got = self.mock.requests_for(&orch.brief);
            (got.len() >= n).then(|| got.into_iter().map(|r| r.body).collect())
        })
        .await
        .ok_or_else(|| format!("the model was not called {n} time(s) within {PROMPT:?}"))
    }

    /// Waits for the Orchestrator's last record to say `ended` with `reason`.
    async fn ended(&self, orch: &Orch, reason: &str) -> Result<(), String> {
        until(PROMPT, || async {
            let last = crate::kit::last_record(&self.js, &orch.id).await?;
            (last["snapshot"]["phase"] == "ended" && last["snapshot"]["reason"] == reason)
                .then_some(())
        })
        .await
        .ok_or_else(|| format!("its last state record does not say ended/{reason}"))
    }
}

/// The text of the last user message of a request.
fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str().or(b["content"].as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn check(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why()) }
}

pub async fn run(kit: &Kit) -> Vec<Row> {
    let mut rows = Rows(Vec::new());
    if let Err(e) = kit.spawn_worker("conformance-w1") {
        rows.add("worker starts", Err(e));
        return rows.0;
    }
    main_line(kit, &mut rows).await;
    endings(kit, &mut rows).await;
    during_a_call(kit, &mut rows).await;
    large_record(kit, &mut rows).await;
    evidence(kit, &mut rows).await;
    malformed(kit, &mut rows).await;
    takeover(kit, &mut rows).await;
    rows.0
}

/// Claim, questions and notes, inputs in order, the lease, release.
async fn main_line(kit: &Kit, rows: &mut Rows) {
    let mut orch = kit.summon("main").await;
    kit.mock.push(&orch.brief, question("Q1: TOML or YAML?"));

    // Claim: a status, a state record by the worker, the summons held.
    let claim = async {
        let status = until(PROMPT, || async {
            kit.statuses_of(&orch.id).into_iter().next()
        })
        .await
        .ok_or_else(|| format!("no status on orch.<id>.status within {PROMPT:?}"))?;
        check(
            status["number"] == 1 && status["worker_id"].is_string(),
            || format!("the status lacks number or worker_id: {status}"),
        )?;
        let worker = status["worker_id"].as_str().unwrap_or_default().to_owned();
        let records = kit.records(&orch.id).await;
        let first = records
            .first()
            .ok_or_else(|| String::from("no state record on orch.<id>.state"))?;
        check(first["rev"] == 1, || {
            format!("the first record's rev is {}", first["rev"])
        })?;
        check(first["worker_id"] == worker.as_str(), || {
            format!("records by {}, status from {worker}", first["worker_id"])
        })?;
        check(kit.summons_present(orch.summons_seq).await, || {
            "the summons was acked while its Orchestrator runs (it is the lease)".into()
        })
    };
    rows.add(
        "claim: status, first state record, summons held",
        claim.await,
    );

    let question1 = kit.out(&orch, 1).await;
    rows.add(
        "question: output seq 1 with expects_response true",
        question1.as_ref().map_err(Clone::clone).and_then(|o| {
            check(
                o.body["event"]["type"] == "output"
                    && o.body["event"]["expects_response"] == true
                    && o.body["event"]["message"] == "Q1: TOML or YAML?",
                || format!("got {}", o.body["event"]),
            )
        }),
    );
    rows.add(
        "stored before published (output seq 1)",
        question1.and_then(|o| {
            check(o.stored_first, || {
                "orch.<id>.out seq 1 came before a state record with out_seq >= 1".into()
            })
        }),
    );
    rows.add(
        "status waiting after a question",
        kit.status(&orch, "waiting").await.map(|_| ()),
    );

    // The lease: waiting for three leases, the summons is never redelivered.
    tokio::time::sleep(kit.lease * 3).await;
    let redelivered = kit.pool_redelivered().await;
    rows.add(
        "lease renewed while waiting (no redelivery in 3 leases)",
        check(redelivered == Some(0), || {
            format!("the pool consumer redelivered {redelivered:?} summons")
        }),
    );

    // Inputs in order: seq 2 first, then seq 1; the model sees 1 before 2.
    kit.mock.push(&orch.brief, note("N1: noted, working."));
    kit.mock.push(&orch.brief, question("Q2: anything else?"));
    kit.input(&orch, 2, "second input").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let early = kit.mock.requests_for(&orch.brief).len();
    kit.input(&orch, 1, "first input").await;
    orch.inputs = 2;
    let order = async {
        check(early == 1, || {
            "the model was called with input seq 2 before seq 1 arrived".into()
        })?;
        let requests = kit.requests(&orch, 2).await?;
        let text = last_user_text(&requests[1]);
        let (a, b) = (text.find("first input"), text.find("second input"));
        match (a, b) {
            (Some(a), Some(b)) if a < b => Ok(()),
            (Some(_), None) => {
                // Taken one by one: the second must come in a later request.
                let later = kit.requests(&orch, 3).await?;
                check(last_user_text(&later[2]).contains("second input"), || {
                    "input seq 2 never reached the model".into()
                })
            }
            _ => Err(format!("the model's next user message was {text:?}")),
        }
    };
    rows.add("inputs taken in seq order", order.await);

    // A note goes out and the worker keeps working without an input.
    let notes = async {
        let n = kit.out(&orch, 2).await?;
        check(n.body["event"]["expects_response"] == false, || {
            format!("seq 2 was {}", n.body["event"])
        })?;
        let q = kit.out(&orch, 3).await?;
        check(q.body["event"]["expects_response"] == true, || {
            format!("seq 3 was {}", q.body["event"])
        })
    };
    rows.add(
        "a note is followed by more work, no input needed",
        notes.await,
    );

    // A duplicate input (an old seq, another msg id) is dropped.
    let calls = kit.mock.requests_for(&orch.brief).len();
    let dup = json!({"v":1,"session_id":"conf","orch_id":orch.id,"seq":1,
        "message":"DUPLICATE","sent_at":now()});
    kit.publish(
        subjects::orch_in(&orch.id),
        &format!("{}:in:1:again", orch.id),
        dup.to_string().into(),
    )
    .await;
    let dup = json!({"v":3,"session_id":orch.session,"seq":1,"at":now(),
        "body":{"type":"arbiter_to_orchestrator","number":1,"orch_id":orch.id,
            "text":"DUPLICATE","input_seq":1}});
    kit.publish(
        subjects::session_input(&orch.session, &orch.id, 1),
        &format!("{}:log:{}:1:again", orch.session, orch.id),
        dup.to_string().into(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = kit.mock.requests_for(&orch.brief);
    rows.add(
        "a duplicate input seq is dropped",
        check(
            after.len() == calls && !after.iter().any(|r| r.all_text().contains("DUPLICATE")),
            || "the model was called with a duplicate input".into(),
        ),
    );

    // A malformed input is dropped and the Orchestrator goes on: garbage on
    // `.in`, and on the subject of the next log entry input, which then
    // holds the real input as its newest message.
    kit.publish(
        subjects::orch_in(&orch.id),
        &format!("{}:in:garbage", orch.id),
        "{not json".into(),
    )
    .await;
    kit.publish(
        subjects::session_input(&orch.session, &orch.id, orch.inputs + 1),
        &format!("{}:log:{}:garbage", orch.session, orch.id),
        "{not json".into(),
    )
    .await;
    kit.mock
        .push(&orch.brief, question("Q3: after the garbage."));
    orch.inputs += 1;
    kit.input(&orch, orch.inputs, "third input").await;
    let goes_on = async {
        let q = kit.out(&orch, 4).await?;
        check(
            q.body["event"]["message"] == "Q3: after the garbage.",
            || format!("seq 4 was {}", q.body["event"]),
        )
    };
    rows.add(
        "a malformed input is dropped; the Orchestrator goes on",
        goes_on.await,
    );

    // Release: stopped status, ended record, summons acked, no input consumer left, no output.
    let outs_before = kit.outs_of(&orch.id).len();
    kit.control(&orch, "release").await;
    let release = async {
        kit.ended(&orch, "released").await?;
        kit.status(&orch, "stopped").await?;
        until(PROMPT, || async {
            (!kit.summons_present(orch.summons_seq).await).then_some(())
        })
        .await
        .ok_or_else(|| String::from("the summons was not acked after the release"))?;
        until(PROMPT, || async {
            (!kit.input_consumer_exists(&orch.id).await).then_some(())
        })
        .await
        .ok_or_else(|| String::from("an orch-<id> consumer was left after the release"))?;
        let outs = kit.outs_of(&orch.id).len();
        check(outs == outs_before, || {
            "an output was published on release".into()
        })
    };
    rows.add(
        "release: end stored, stopped, summons acked, no input consumer left",
        release.await,
    );
}

/// What comes while the model is busy: an input is stored at once (into the
/// record's `inbox`) and reaches the next call; a cancel ends the
/// Orchestrator at once, and the reply that comes after is never published.
async fn during_a_call(kit: &Kit, rows: &mut Rows) {
    let orch = kit.summon("mid-call").await;
    let hold = arbiter_tests::Gate::new();
    kit.mock
        .push(&orch.brief, note("N: working on it.").gated(hold.clone()));
    kit.mock
        .push(&orch.brief, question("Q: did the input come?"));
    let input = async {
        kit.requests(&orch, 1).await?;
        kit.input(&orch, 1, "MID-CALL INPUT").await;
        let stored = until(PROMPT, || async {
            let last = crate::kit::last_record(&kit.js, &orch.id).await?;
            let inbox = last["snapshot"]["inbox"].as_array()?.clone();
            inbox
                .iter()
                .any(|t| t.as_str().is_some_and(|t| t.contains("MID-CALL INPUT")))
                .then_some(())
        })
        .await;
        hold.open();
        stored.ok_or_else(|| {
            format!(
                "no state record with the input in its inbox within {PROMPT:?} while the \
                 model call was held"
            )
        })?;
        let requests = kit.requests(&orch, 2).await?;
        check(
            last_user_text(&requests[1]).contains("MID-CALL INPUT"),
            || "the input did not reach the next model call".into(),
        )?;
        kit.out(&orch, 2).await.map(|_| ())
    };
    let input = input.await;
    hold.open();
    rows.add(
        "input during a model call: stored at once, in the next call",
        input,
    );
    kit.control(&orch, "release").await;

    let orch = kit.summon("mid-call-cancel").await;
    let hold = arbiter_tests::Gate::new();
    kit.mock.push(
        &orch.brief,
        question("Q: never published.").gated(hold.clone()),
    );
    let cancel = async {
        kit.requests(&orch, 1).await?;
        kit.control(&orch, "cancel").await;
        let ended = kit.ended(&orch, "cancelled").await;
        let stopped = kit.status(&orch, "stopped").await;
        hold.open();
        ended.map_err(|e| format!("{e} while the model call was held"))?;
        stopped?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        check(kit.outs_of(&orch.id).is_empty(), || {
            "the held reply was published after the cancel".into()
        })
    };
    let cancel = cancel.await;
    hold.open();
    rows.add(
        "cancel during a model call: ended at once, its reply never published",
        cancel,
    );
}

/// The text of the big reply: with the reply in `append` and the output in
/// `outbox`, its record passes a NATS message, while the output fits one.
const BIG: usize = 600_000;

/// A record too large for one message is stored as an object of
/// `arbiter_orch_blobs`, with a pointer on the subject, and the output goes out.
async fn large_record(kit: &Kit, rows: &mut Rows) {
    let orch = kit.summon("large").await;
    // Numbered words: no unit repeats (a worker may stop a looping reply).
    let words: Vec<String> = (100_000..100_000 + BIG / 8)
        .map(|i| format!("w{i}"))
        .collect();
    let big = format!("Q: {}", words.join(" "));
    kit.mock.push(&orch.brief, question(&big));
    let rule = async {
        let out = kit.out(&orch, 1).await?;
        check(out.body["event"]["message"] == big.as_str(), || {
            "output seq 1 is not the model's reply".into()
        })?;
        let pointer = crate::kit::last_record(&kit.js, &orch.id)
            .await
            .ok_or_else(|| String::from("no state record"))?;
        let name = pointer["blob"].as_str().ok_or_else(|| {
            format!(
                "the last record is no pointer (no \"blob\"): {}",
                crate::kit::clip(&pointer.to_string())
            )
        })?;
        let record = kit.blob(name).await?;
        check(
            record["rev"] == pointer["rev"]
                && record["outbox"][0]["event"]["message"] == big.as_str(),
            || {
                format!(
                    "object {name} is not the record rev {} with the output",
                    pointer["rev"]
                )
            },
        )
    };
    rows.add(
        "a record too large for a message: an object, a pointer on the subject",
        rule.await,
    );
    kit.control(&orch, "release").await;
}

/// Evidence is optional; when an output carries it, it decodes as
/// `Evidence` and tells the truth: no tool call (the model called none) and
/// the file the kit created in the workspace while the model was busy.
async fn evidence(kit: &Kit, rows: &mut Rows) {
    let orch = kit.summon("evidence").await;
    let hold = arbiter_tests::Gate::new();
    kit.mock
        .push(&orch.brief, question("Q: done?").gated(hold.clone()));
    let rule = async {
        kit.requests(&orch, 1).await?;
        let file = kit.workspace("conf-evidence").join("made-by-the-kit.txt");
        let made = std::fs::write(&file, "evidence\n");
        hold.open();
        made.map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        let out = kit.out(&orch, 1).await?;
        let Some(evidence) = out.body.get("evidence") else {
            return Ok(()); // optional
        };
        let evidence: arbiter_protocol::Evidence = serde_json::from_value(evidence.clone())
            .map_err(|e| format!("its evidence does not decode: {e}"))?;
        check(evidence.tools.iter().all(|t| t.calls == 0), || {
            format!("its evidence counts tool calls: {:?}", evidence.tools)
        })?;
        check(
            evidence
                .files
                .created
                .iter()
                .any(|f| f == "made-by-the-kit.txt"),
            || format!("its evidence misses the file created: {:?}", evidence.files),
        )
    };
    let outcome = rule.await;
    hold.open();
    rows.add(
        "evidence, if sent: decodes, no tool calls, the file created",
        outcome,
    );
    kit.control(&orch, "release").await;
}

/// Cancel, a duplicate summons, the failed-event kinds.
async fn endings(kit: &Kit, rows: &mut Rows) {
    let orch = kit.summon("cancel").await;
    kit.mock.push(&orch.brief, question("Q: shall I?"));
    let ready = kit.out(&orch, 1).await;
    // A second summons of the same Orchestrator (another msg id) while it runs.
    let dup = async {
        ready.clone()?;
        let before = kit.records(&orch.id).await.len();
        let summons = json!({"v":1,"session_id":"conf-cancel","orch_id":orch.id,"number":1,
            "brief":orch.brief,"workspace":null,"pool":POOL,"summoned_at":now()});
        let seq = kit
            .publish(
                subjects::summon(POOL),
                &format!("{}:again", orch.id),
                summons.to_string().into(),
            )
            .await;
        until(PROMPT, || async {
            (!kit.summons_present(seq).await).then_some(())
        })
        .await
        .ok_or_else(|| String::from("the duplicate summons was not acked"))?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let records = kit.records(&orch.id).await;
        let claimed = records[before.min(records.len())..]
            .iter()
            .any(|r| r["summons_seq"] == seq);
        check(!claimed, || {
            "a record names the duplicate summons: a claim of a live Orchestrator".into()
        })?;
        check(kit.summons_present(orch.summons_seq).await, || {
            "the original summons (the lease) was acked".into()
        })
    };
    rows.add("a duplicate summons is acked, not claimed", dup.await);
    kit.control(&orch, "cancel").await;
    let cancel = async {
        kit.ended(&orch, "cancelled").await?;
        kit.status(&orch, "stopped").await?;
        until(PROMPT, || async {
            (!kit.summons_present(orch.summons_seq).await).then_some(())
        })
        .await
        .ok_or_else(|| String::from("the summons was not acked after the cancel"))
        .map(|_| ())
    };
    rows.add("cancel: end stored, stopped, summons acked", cancel.await);

    // A model call that fails for good: failed, kind model.
    let orch = kit.summon("model-fails").await;
    kit.mock.push(
        &orch.brief,
        MockReply::http_error(401, "authentication_error", "invalid x-api-key"),
    );
    let failed = async {
        let f = kit.out(&orch, 1).await?;
        let e = &f.body["event"];
        check(
            e["type"] == "failed"
                && e["error"]["kind"] == "model"
                && e["error"]["role"] == "orchestrator"
                && e["error"]["class"] == "authentication",
            || format!("got {e}"),
        )?;
        kit.ended(&orch, "failed").await?;
        until(PROMPT, || async {
            (!kit.summons_present(orch.summons_seq).await).then_some(())
        })
        .await
        .ok_or_else(|| String::from("the summons was not acked after the failure"))
        .map(|_| ())
    };
    rows.add("failed: model (class authentication)", failed.await);

    // A reply that never fits the schema: failed, kind schema_violation.
    let orch = kit.summon("schema-fails").await;
    for _ in 0..=SCHEMA_REPAIRS {
        kit.mock
            .push(&orch.brief, MockReply::text("I am not JSON at all."));
    }
    let failed = async {
        let f = kit.out(&orch, 1).await?;
        let e = &f.body["event"];
        check(
            e["type"] == "failed"
                && e["error"]["kind"] == "schema_violation"
                && e["error"]["role"] == "orchestrator",
            || format!("got {e}"),
        )?;
        kit.ended(&orch, "failed").await
    };
    rows.add("failed: schema_violation after the repairs", failed.await);
}

/// Summonses that cannot be run are terminated, not retried.
async fn malformed(kit: &Kit, rows: &mut Rows) {
    let garbage = kit
        .publish(subjects::summon(POOL), "conf-garbage", "{not json".into())
        .await;
    let bad_id = json!({"v":1,"session_id":"conf","orch_id":"bad.id","number":1,
        "brief":"x","workspace":null,"pool":POOL,"summoned_at":now()});
    let bad = kit
        .publish(
            subjects::summon(POOL),
            "conf-bad-id",
            bad_id.to_string().into(),
        )
        .await;
    let gone = until(PROMPT, || async {
        (!kit.summons_present(garbage).await && !kit.summons_present(bad).await).then_some(())
    })
    .await;
    rows.add(
        "malformed summonses are terminated (not JSON, an id that is no token)",
        check(gone.is_some(), || {
            "a malformed summons is still in the stream".into()
        }),
    );
    rows.add(
        "presence: $SRV.PING.arbiter-worker names the pool",
        presence(kit).await,
    );
    rows.add(
        "the worker survives malformed input",
        check(kit.worker_alive("conformance-w1"), || {
            "the worker exited".into()
        }),
    );
}

/// kill -9 and a takeover by another worker; then fencing.
async fn takeover(kit: &Kit, rows: &mut Rows) {
    let mut orch = kit.summon("takeover").await;
    kit.mock.push(&orch.brief, question("QT1: which file?"));
    if let Err(e) = kit.out(&orch, 1).await {
        rows.add("takeover after kill -9", Err(e));
        return;
    }
    kit.kill_worker("conformance-w1").await;
    if let Err(e) = kit.spawn_worker("conformance-w2") {
        rows.add("takeover after kill -9", Err(e));
        return;
    }
    kit.mock.push(&orch.brief, question("QT2: done there?"));
    let takeover = async {
        // The new worker claims it: a status and a record of its own.
        until(PROMPT + kit.lease * 3, || async {
            let last = crate::kit::last_record(&kit.js, &orch.id).await?;
            (last["worker_id"] == "conformance-w2").then_some(())
        })
        .await
        .ok_or_else(|| String::from("no state record by the second worker (no claim)"))?;
        orch.inputs = 1;
        kit.input(&orch, 1, "config.toml").await;
        let q = kit.out(&orch, 2).await?;
        check(q.body["event"]["message"] == "QT2: done there?", || {
            format!("seq 2 was {}", q.body["event"])
        })?;
        // The model saw the whole conversation: the brief, QT1, the input.
        let requests = kit.mock.requests_for(&orch.brief);
        let last = requests
            .last()
            .ok_or_else(|| String::from("no model call"))?;
        let text = last.all_text();
        check(
            text.contains(&orch.brief)
                && text.contains("QT1: which file?")
                && text.contains("config.toml"),
            || "the resumed model call lacks the stored transcript".into(),
        )?;
        let w2 = kit
            .statuses_of(&orch.id)
            .iter()
            .any(|s| s["worker_id"] == "conformance-w2");
        check(w2, || "no status from the second worker".into())
    };
    rows.add(
        "takeover after kill -9: claimed, transcript resumed, seq goes on",
        takeover.await,
    );

    // Fencing: another writer appends a record; the holder must never
    // write a record that is not fenced on it.
    let fencing = async {
        let stream = kit
            .js
            .get_stream(subjects::ORCH_STATE_STREAM)
            .await
            .map_err(|e| e.to_string())?;
        // The last message over `.state` and `.out` is what is fenced on;
        // the record forged on is the last record (a bare output is none).
        let records = subjects::orch_records(&orch.id);
        let last = stream
            .get_last_raw_message_by_subject(&records)
            .await
            .map_err(|e| e.to_string())?;
        let mut forged = crate::kit::last_record(&kit.js, &orch.id)
            .await
            .ok_or_else(|| String::from("no state record"))?;
        let rev = forged["rev"].as_u64().unwrap_or(0) + 1;
        forged["rev"] = json!(rev);
        forged["worker_id"] = json!("conformance-fencer");
        forged["append"] = json!([]);
        forged["outbox"] = json!([]);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            "Nats-Msg-Id",
            format!("{}:state:{rev}:fencer", orch.id).as_str(),
        );
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            last.sequence.to_string().as_str(),
        );
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence-Subject",
            records.as_str(),
        );
        kit.js
            .publish_with_headers(
                subjects::orch_state(&orch.id),
                headers,
                forged.to_string().into(),
            )
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        // Make the holder write: an input to store and a turn to run. A
        // worker that stores the input before its model call is fenced
        // there; one that stores it with the reply is fenced after the
        // call, which is then made again after the new claim: a second reply.
        for _ in 0..2 {
            kit.mock
                .push(&orch.brief, question("QT3: after the fence."));
        }
        kit.input(&orch, 2, "go on").await;
        // Whoever goes on (the holder after a new claim) must be fenced on the forged record.
        kit.out(&orch, 3).await.map_err(|e| {
            format!("{e} (after a fence the summons must come back and be claimed again)")
        })?;
        let records = kit.records(&orch.id).await;
        let revs: Vec<u64> = records.iter().filter_map(|r| r["rev"].as_u64()).collect();
        let consecutive = revs.windows(2).all(|w| w[1] == w[0] + 1);
        check(consecutive, || {
            format!(
                "the record revs are not consecutive (a write not fenced on the last): {revs:?}"
            )
        })
    };
    rows.add(
        "fencing: no record written over another writer's",
        fencing.await,
    );
    kit.control(&orch, "release").await;
    let _ = kit.ended(&orch, "released").await;
}

/// Presence: a PING of the worker service is answered with the pool in its metadata.
async fn presence(kit: &Kit) -> Result<(), String> {
    let inbox = kit.client.new_inbox();
    let mut replies = kit
        .client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| e.to_string())?;
    kit.client
        .publish_with_reply(
            format!("$SRV.PING.{}", subjects::WORKER_SERVICE),
            inbox,
            "".into(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let deadline = tokio::time::sleep(Duration::from_secs(2));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => return Err("no answer naming the pool within 2 s".into()),
            reply = futures::StreamExt::next(&mut replies) => {
                let Some(reply) = reply else { return Err("no answer".into()) };
                let body: Value = serde_json::from_slice(&reply.payload).unwrap_or(Value::Null);
                if body["metadata"]["pool"] == POOL {
                    return Ok(());
                }
            }
        }
    }
}
