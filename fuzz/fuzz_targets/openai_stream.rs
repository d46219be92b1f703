#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| arbiter_llm::fuzz::openai_stream(data));
