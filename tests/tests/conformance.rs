//! `arbiter-conformance` run against `arbiter-worker`: every rule passes, and
//! the table names each rule (what a worker author sees).

#[test]
fn arbiter_worker_passes_the_conformance_kit() {
    let kit = env!("CARGO_BIN_EXE_arbiter-conformance");
    let worker = arbiter_tests::bin("arbiter-worker");
    assert!(
        worker.exists(),
        "build the binaries first: {}",
        worker.display()
    );
    let out = std::process::Command::new(kit)
        .arg("--worker-cmd")
        .arg(format!("exec '{}'", worker.display()))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the kit failed:\n{table}");
    for rule in [
        "claim: status, first state record, summons held",
        "stored before published (output seq 1)",
        "inputs taken in seq order",
        "lease renewed while waiting (no redelivery in 3 leases)",
        "takeover after kill -9: claimed, transcript resumed, seq goes on",
        "fencing: no record written over another writer's",
        "input during a model call: stored at once, in the next call",
        "cancel during a model call: ended at once, its reply never published",
        "a record too large for a message: an object, a pointer on the subject",
        "evidence, if sent: decodes, no tool calls, the file created",
        "failed: model (class authentication)",
        "failed: schema_violation after the repairs",
        "presence: $SRV.PING.arbiter-worker names the pool",
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(rule) && l.ends_with("PASS")),
            "no PASS row for {rule:?}:\n{table}"
        );
    }
    assert!(!table.contains("FAIL"), "{table}");
}

/// The Python interpreter with nats-py, installed into `.tools/` when missing.
pub(crate) fn python() -> String {
    if let Some(python) = std::env::var_os("ARBITER_PYTHON") {
        return python.to_string_lossy().into_owned();
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/install-nats-py");
    let out = std::process::Command::new(script).output().unwrap();
    assert!(
        out.status.success(),
        "scripts/install-nats-py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn run_kit(worker_cmd: &str) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arbiter-conformance"))
        .arg("--worker-cmd")
        .arg(worker_cmd)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{table}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), table)
}

pub(crate) const PYTHON_WORKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/python-worker/worker.py"
);

#[test]
fn the_python_reference_worker_passes_the_conformance_kit() {
    let (ok, table) = run_kit(&format!("exec '{}' -u '{PYTHON_WORKER}'", python()));
    assert!(ok, "the kit failed:\n{table}");
    assert!(!table.contains("FAIL"), "{table}");
    assert!(table.contains("23 of 23 rules passed"), "{table}");
}

/// A copy of the reference worker that publishes an output before storing
/// the step that decided it (half a second before): the kit names that rule.
#[test]
fn a_worker_that_publishes_before_storing_fails_by_that_rule() {
    let source = std::fs::read_to_string(PYTHON_WORKER).unwrap();
    let right = "        await self.write(pending_append, [message])  # stored first ...\n        \
                 await self.publish([message])  # ... then published\n";
    assert!(source.contains(right), "the reference worker changed");
    let wrong = "        await self.publish([message])  # published first ...\n        \
                 await asyncio.sleep(0.5)\n        \
                 await self.write(pending_append, [message])  # ... then stored\n";
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken_worker.py");
    std::fs::write(&broken, source.replace(right, wrong)).unwrap();

    let (ok, table) = run_kit(&format!("exec '{}' -u '{}'", python(), broken.display()));
    assert!(
        !ok,
        "the kit passed a worker that publishes first:\n{table}"
    );
    let failed: Vec<&str> = table.lines().filter(|l| l.contains("  FAIL")).collect();
    assert!(
        failed
            .iter()
            .any(|l| l.starts_with("stored before published (output seq 1)")),
        "{table}"
    );
}

/// A copy of the reference worker that says `session_inputs` on its outputs
/// (it reads inputs as log entries) but reads `orch.<id>.in` instead: the kit,
/// like a coordinator, stops sending `.in` once an output says so, and the
/// worker never sees an input after its first output.
#[test]
fn a_worker_that_says_session_inputs_and_reads_the_v2_subject_fails_by_the_inputs_rule() {
    let source = std::fs::read_to_string(PYTHON_WORKER).unwrap();
    let start = source
        .find("    async def input_at(self, n):")
        .expect("the reference worker changed");
    let end = source
        .find("    async def wait_for_input(self):")
        .expect("the reference worker changed");
    let v2 = r#"    async def input_at(self, n):
        """Input n from orch.<id>.in (the v2 subject), wrongly."""
        seq = 1
        while True:
            try:
                m = await self.js.get_msg("ARBITER_ORCH", seq=seq, next=True, direct=True,
                                          subject=f"{PREFIX}.orch.{self.id}.in")
            except NotFoundError:
                return None
            seq = m.seq + 1
            try:
                body = json.loads(m.data)
                if int(body["seq"]) == n:
                    return m.seq, str(body["message"])
            except (ValueError, KeyError, TypeError):
                pass

"#;
    let broken_source = format!("{}{v2}{}", &source[..start], &source[end..]);
    assert!(broken_source.contains("\"session_inputs\": True"));
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("v2_reader.py");
    std::fs::write(&broken, broken_source).unwrap();

    let (ok, table) = run_kit(&format!("exec '{}' -u '{}'", python(), broken.display()));
    assert!(
        !ok,
        "the kit passed a worker that reads the wrong subject:\n{table}"
    );
    // It asks its question (output 1) before any input, so that rule holds;
    // the first input it waits for never comes.
    let row = |rule: &str, verdict: &str| {
        table
            .lines()
            .any(|l| l.starts_with(rule) && l.contains(verdict))
    };
    assert!(
        row("stored before published (output seq 1)", "PASS"),
        "{table}"
    );
    assert!(row("inputs taken in seq order", "FAIL"), "{table}");
}
