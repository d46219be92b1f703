#![no_main]

// The first byte picks whose records the rest is: an Orchestrator's (the
// worker's state), a session's (the coordinator's log), a session's archive.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((&pick, rest)) = data.split_first() {
        match pick % 3 {
            0 => arbiter_worker::fuzz::orchestrator_records(rest),
            1 => arbiter_coordinator::fuzz::session_records(rest),
            _ => arbiter_bus::fuzz::archive(rest),
        }
    }
});
