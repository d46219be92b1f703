"""An MCP server for the tests of the worker's MCP client
(tests/tests/mcp_client.rs), written with the `mcp` PyPI SDK.

    test_server.py stdio                  MCP over stdin and stdout
    test_server.py http <token-env-var>   streamable HTTP on 127.0.0.1, any port:
                                          every request must carry
                                          `Authorization: Bearer <the variable's value>`
                                          (else 401); prints `listening <url>` once ready
    test_server.py exit                   writes a line to stderr and exits 3 at once
    test_server.py mute                   reads stdin and never answers (no initialize)

Its tools: `echo` (the text back), `fail` (a tool error), `hang` (sleeps
an hour), and `mark` (appends a line to `mcp-marks.txt` in its working
directory and says how many lines it holds), so a test counts the calls
that reached it.
"""

import asyncio
import os
import sys

# The broken modes act before the SDK is imported (which takes a while).
if __name__ == "__main__" and sys.argv[1:2] == ["exit"]:
    sys.stderr.write("test_server.py: cannot start: no database here\n")
    sys.exit(3)
if __name__ == "__main__" and sys.argv[1:2] == ["mute"]:
    for _ in sys.stdin:
        pass
    sys.exit(0)

from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

server = MCPServer("arbiter-test-server")


@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    return f"echo: {text}"


@server.tool()
def fail(why: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"the fail tool failed as asked: {why}")


@server.tool()
async def hang() -> str:
    """Never answers in time."""
    await asyncio.sleep(3600)
    return "too late"


@server.tool()
def mark(label: str) -> str:
    """Appends a line to mcp-marks.txt and says how many it holds."""
    with open("mcp-marks.txt", "a", encoding="utf-8") as f:
        f.write(label + "\n")
    with open("mcp-marks.txt", encoding="utf-8") as f:
        count = sum(1 for _ in f)
    return f"marked {label}; mcp-marks.txt holds {count} line(s)"


def bearer_only(app, token):
    """The app, refusing any request without the bearer token (401)."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != expected:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is needed"})
                return
        await app(scope, receive, send)

    return guarded


async def serve_http(token_env):
    import uvicorn

    token = os.environ.get(token_env)
    if not token:
        sys.exit(f"test_server.py http: ${token_env} is not set")
    app = bearer_only(server.streamable_http_app(), token)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve())
    while not web.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    port = web.servers[0].sockets[0].getsockname()[1]
    print(f"listening http://127.0.0.1:{port}/mcp", flush=True)
    await task


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        asyncio.run(serve_http(sys.argv[2]))
    else:
        sys.exit(f"test_server.py: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
