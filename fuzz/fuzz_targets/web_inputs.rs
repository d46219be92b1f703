#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| arbiter_web::fuzz::web_inputs(data));
