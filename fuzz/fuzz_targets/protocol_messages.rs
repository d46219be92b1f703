#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| arbiter_protocol::fuzz::protocol_messages(data));
