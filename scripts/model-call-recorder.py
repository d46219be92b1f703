#!/usr/bin/env python3
"""A pass-through HTTP proxy in front of an OpenAI-compatible server that
records one JSON line per model call: whether the request carried tools and a
response_format, the tool calls the model made, its finish reason, token
usage and time. scripts/check-local-model puts it between Arbiter and
llama-server to count model and tool calls. Standard library only.

    model-call-recorder.py --port 8081 --upstream http://127.0.0.1:8080 --record calls.jsonl
    model-call-recorder.py --summary calls.jsonl     # prints the totals as JSON
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-authorization", "proxy-authenticate", "content-length", "host"}


def parse_request(body):
    try:
        req = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(req, dict):
        return {}
    rf = req.get("response_format")
    js = (rf.get("json_schema") or {}) if isinstance(rf, dict) else {}
    schema = js.get("schema") if isinstance(js.get("schema"), dict) else {}
    # A union at the root: its members' first required property (the
    # Arbiter's `intent`, a step's tool `name`) tells what kind of form it is.
    members = schema.get("anyOf") or []
    return {
        "tools": len(req.get("tools") or []),
        "tool_choice": req.get("tool_choice"),
        "response_format": rf.get("type") if isinstance(rf, dict) else None,
        "response_format_strict": js.get("strict"),
        "response_format_union": len(members),
        "union_of": sorted({(m.get("required") or ["?"])[0] for m in members if isinstance(m, dict)}),
        "messages": len(req.get("messages") or []),
        "stream": bool(req.get("stream")),
    }


class Reply:
    """What the model answered, from a JSON body or SSE chunks."""

    def __init__(self):
        self.calls = {}
        self.content = []
        self.finish = None
        self.usage = None

    def choice(self, choice, delta_key):
        part = choice.get(delta_key) or {}
        if part.get("content"):
            self.content.append(part["content"])
        for call in part.get("tool_calls") or []:
            slot = self.calls.setdefault(call.get("index", len(self.calls)), {"name": "", "arguments": ""})
            fn = call.get("function") or {}
            slot["name"] += fn.get("name") or ""
            slot["arguments"] += fn.get("arguments") or ""
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]

    def chunk(self, obj, delta_key="delta"):
        if not isinstance(obj, dict):
            return
        for choice in obj.get("choices") or []:
            self.choice(choice, delta_key)
        if obj.get("usage"):
            self.usage = obj["usage"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        self.forward(self.rfile.read(length))

    def forward(self, body):
        started = time.time()
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port or 80, timeout=3600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        path = up.path.rstrip("/") + self.path if up.path not in ("", "/") else self.path
        try:
            conn.request(self.command, path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError as e:
            self.send_error(502, f"upstream: {e}")
            return
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sse = "text/event-stream" in (resp.getheader("content-type") or "")
        reply, raw = Reply(), []
        try:
            while True:
                line = resp.readline() if sse else resp.read(65536)
                if not line:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                if sse:
                    text = line.decode("utf-8", "replace").strip()
                    if text.startswith("data:") and text[5:].strip() not in ("", "[DONE]"):
                        try:
                            reply.chunk(json.loads(text[5:]))
                        except ValueError:
                            pass
                else:
                    raw.append(line)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass
        finally:
            conn.close()
        if body is None or not self.path.rstrip("/").endswith("/chat/completions"):
            return
        if not sse:
            try:
                reply.chunk(json.loads(b"".join(raw)), "message")
            except ValueError:
                pass
        usage = reply.usage or {}
        record = {
            "at": round(started, 3),
            "secs": round(time.time() - started, 2),
            "status": resp.status,
            **parse_request(body),
            "finish_reason": reply.finish,
            "tool_calls": [reply.calls[i]["name"] for i in sorted(reply.calls)],
            "tool_call_arguments": [reply.calls[i]["arguments"][:300] for i in sorted(reply.calls)],
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "content": "".join(reply.content)[:600],
        }
        if resp.status != 200:
            record["error"] = b"".join(raw)[:600].decode("utf-8", "replace")
        with self.server.lock, open(self.server.record, "a") as f:
            f.write(json.dumps(record) + "\n")


def text_call(content):
    """A tool call written out as text, `{"name": …, "arguments": {…}}`, fenced
    or not: small models write these instead of their template's call markup,
    and Arbiter (structured_output tool or prompt) takes them as calls."""
    text = (content or "").strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[-1].rsplit("```", 1)[0].strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(obj.get("arguments"), dict):
        return obj["name"]
    return None


def union_step(content):
    """A step of structured_output "union": `{"name": …, "parameters": {…}}`."""
    try:
        obj = json.loads((content or "").strip())
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(obj.get("parameters"), dict):
        return obj["name"]
    return None


def summary(path):
    calls = []
    try:
        with open(path) as f:
            calls = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        pass
    with_tools = [c for c in calls if c.get("tools")]
    names = {}
    for c in calls:
        for n in c["tool_calls"]:
            names[n] = names.get(n, 0) + 1
    text_names = {}
    for c in calls:
        n = text_call(c.get("content")) if c.get("tools") and not c["tool_calls"] else None
        if n:
            text_names[n] = text_names.get(n, 0) + 1
    steps = {}
    for c in calls:
        n = union_step(c.get("content")) if "name" in (c.get("union_of") or []) else None
        if n:
            steps[n] = steps.get(n, 0) + 1
    finishes = {}
    for c in calls:
        finishes[str(c.get("finish_reason"))] = finishes.get(str(c.get("finish_reason")), 0) + 1
    return {
        "model_calls": len(calls),
        "calls_with_tools": len(with_tools),
        "calls_without_tools": len(calls) - len(with_tools),
        "failed_calls": sum(1 for c in calls if c.get("status") != 200),
        "tool_calls": sum(len(c["tool_calls"]) for c in calls),
        "tool_calls_by_name": names,
        "text_tool_calls": sum(text_names.values()),
        "text_tool_calls_by_name": text_names,
        "union_calls": sum(1 for c in calls if "name" in (c.get("union_of") or [])),
        "union_steps": sum(n for k, n in steps.items() if k != "respond"),
        "union_steps_by_name": steps,
        "arbiter_forms": sorted({f"union of {c['response_format_union']}, strict {c.get('response_format_strict')}"
                                 for c in calls if "intent" in (c.get("union_of") or [])}),
        "completion_tokens": sum(c.get("completion_tokens") or 0 for c in calls),
        "prompt_tokens": sum(c.get("prompt_tokens") or 0 for c in calls),
        "finish_reasons": finishes,
        "response_formats": sorted({str(c.get("response_format")) for c in calls}),
        "model_secs": round(sum(c["secs"] for c in calls), 1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--upstream")
    ap.add_argument("--record")
    ap.add_argument("--summary")
    args = ap.parse_args()
    if args.summary:
        print(json.dumps(summary(args.summary)))
        return
    if not (args.port and args.upstream and args.record):
        ap.error("--port, --upstream and --record are needed")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.upstream = urllib.parse.urlsplit(args.upstream)
    server.record = args.record
    server.lock = threading.Lock()
    print(f"recording model calls on 127.0.0.1:{args.port} -> {args.upstream}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
