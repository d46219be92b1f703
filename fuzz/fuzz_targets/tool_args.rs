#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| arbiter_worker::fuzz::tool_args(data));
