#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| arbiter_coordinator::fuzz::structured_output(data));
