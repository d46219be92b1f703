#![no_main]

// The first byte picks the side: what a client sends the Arbiter's MCP
// server, or what an MCP server sends the worker's client.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((&pick, rest)) = data.split_first() {
        match pick % 2 {
            0 => arbiter_mcp::fuzz::mcp_server(rest),
            _ => arbiter_worker::fuzz::mcp_client(rest),
        }
    }
});
