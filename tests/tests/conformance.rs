//! `arbiter-conformance` run against `arbiter-worker`: every rule passes, and
//! the table names each rule (what a worker author sees).
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
