"""A real MCP client (the `mcp` SDK) for the tests of `arbiter-mcp`
(tests/tests/mcp_server.rs): it connects, then runs one request per line
of stdin and answers each with one line of JSON on stdout.

    drive_arbiter_mcp.py stdio <command> [<arg>...]   launch arbiter-mcp, talk over its stdio
    drive_arbiter_mcp.py http <url> [<token>]          streamable HTTP, with `Authorization: Bearer <token>`

The first line out is `{"connected": {"server": ..., "protocol": ..., "tools": [...]}}`
or `{"error": "..."}` (then it exits 1). Each request is
`{"tool": "<name>", "args": {...}}`; its answer is
`{"is_error": bool, "structured": ..., "text": "..."}`, or `{"error": "..."}`
when the call itself failed (a protocol error, a timeout). The server's
stderr (stdio) is written to the file named by ARBITER_MCP_STDERR, if set.
"""

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# A tool call that takes longer is a hang as far as the tests are concerned.
CALL_TIMEOUT = 60.0


def out(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def leaves(e):
    """The exceptions an exception group holds, however deep (anyio's task
    groups wrap what went wrong, e.g. httpx's HTTPStatusError with its 401,
    in `ExceptionGroup: unhandled errors in a TaskGroup`); `e` itself when
    it is not a group."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for inner in e.exceptions for leaf in leaves(inner)]
    return [e]


def error_of(e):
    """What went wrong, in words: each innermost exception's type and message."""
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves(e))


def text_of(result):
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def serve_requests(client):
    tools = await client.list_tools()
    info = client.server_info
    out(
        {
            "connected": {
                "server": info.name if info else None,
                "protocol": client.protocol_version,
                "tools": [
                    {
                        "name": t.name,
                        "input_schema": t.input_schema,
                        "has_output_schema": t.output_schema is not None,
                    }
                    for t in tools.tools
                ],
            }
        }
    )
    stdin = anyio.wrap_file(sys.stdin)
    async for line in stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                result = await client.call_tool(request["tool"], request.get("args") or {})
        except Exception as e:  # the test reads what went wrong
            out({"error": error_of(e)})
            continue
        out(
            {
                "is_error": bool(result.is_error),
                "structured": result.structured_content,
                "text": text_of(result),
            }
        )


async def main(argv):
    mode = argv[1]
    if mode == "stdio":
        env = {k: v for k, v in os.environ.items() if k.startswith(("NATS_", "RUST_LOG"))}
        params = StdioServerParameters(command=argv[2], args=argv[3:], env=env)
        errlog_path = os.environ.get("ARBITER_MCP_STDERR")
        errlog = open(errlog_path, "w") if errlog_path else sys.stderr
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(params, errlog=errlog)) as client:
            await serve_requests(client)
    elif mode == "http":
        url = argv[2]
        headers = {"Authorization": f"Bearer {argv[3]}"} if len(argv) > 3 else {}
        async with create_mcp_http_client(headers=headers) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                await serve_requests(client)
    else:
        raise SystemExit(f"unknown mode {mode!r}: stdio or http")


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv)
    except Exception as e:
        out({"error": error_of(e)})
        sys.exit(1)
