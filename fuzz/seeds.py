#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from
what the repository records: the examples of docs/protocol.md and
docs/notifications.md, the recorded model streams of llm/tests/fixtures,
and lines in the formats the CLI runtimes print (docs/runtimes.md). Each
seed starts with the byte(s) its target reads first (which type, which
side, the chunk size); they are chosen printable so that the seeds stay
text. Run from anywhere: `python3 fuzz/seeds.py`. The protocol_records
seeds of the worker's and the coordinator's records come from those
crates' own types: their `the_record_seeds_are_what_is_written_today` tests
check them, and write them with `ARBITER_WRITE_SEEDS=1 cargo test -p <crate>
--lib the_record_seeds`."""

import gzip
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def examples(path):
    """(heading, text) of each ```json block of a Markdown file."""
    out, heading, block = [], "", None
    for line in (ROOT / path).read_text().split("\n"):
        t = line.lstrip()
        if block is not None:
            if t.startswith("```"):
                out.append((heading, block))
                block = None
            else:
                block += t + "\n"
        elif line.startswith("#"):
            heading = line
        elif t.startswith("```json"):
            block = ""
    return out


def compact(text):
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


# protocol_messages: the first byte picks the type (its index modulo 32 in
# protocol/src/fuzz.rs); 64 + index keeps it printable.
TYPES = {"Evidence": 0, "Handoff": 1, "Spend": 2, "LogEntry": 3, "Summon": 4,
         "OrchestratorInput": 5, "OrchestratorMessage": 6, "OrchestratorStatus": 7,
         "Control": 8, "HumanMessage": 9, "ArbiterDelta": 10, "SessionStatus": 11,
         "ArbiterOutput": 12, "OrchestratorOutput": 13, "Notification": 19, "Text": 31}


def typed(heading, text):
    """The type a docs/protocol.md example documents (tests/tests/schemas.rs)."""
    text = text.strip()
    if not text.startswith("{"):
        key, value = next(iter(json.loads("{" + text + "}").items()))
        return {"evidence": "Evidence", "handoff": "Handoff", "spend": "Spend"}[key], json.dumps(value)
    h = heading
    for mark, ty in [(".in.<orch_id>.<n>`", "LogEntry"), (".summon.", "Summon"), (".in`", "OrchestratorInput"),
                     (".out`", "OrchestratorMessage"), ("orch_id>.status`", "OrchestratorStatus"),
                     (".ctl`", "Control"), (".human.", "HumanMessage"), (".log`", "LogEntry"),
                     (".delta`", "ArbiterDelta"), ("session_id>.status`", "SessionStatus"),
                     ("Conversation rules", "ArbiterOutput")]:
        if mark in h:
            return ty, text
    return None, text


docs = {}
for heading, text in examples("docs/protocol.md"):
    ty, body = typed(heading, text)
    if ty is None:
        continue
    docs.setdefault(ty, []).append(compact(body))
names = {"LogEntry": ["log-entry-input", "log-entry-orchestrator"]}
for ty, bodies in docs.items():
    for i, body in enumerate(bodies):
        name = names.get(ty, [ty])[i] if ty in names else ty
        slug = "".join("-" + c.lower() if c.isupper() else c for c in name).strip("-")
        write("protocol_messages", f"{slug}.json", chr(64 + TYPES[ty]) + body)
for heading, text in examples("docs/notifications.md"):
    write("protocol_messages", "notification.json", chr(64 + TYPES["Notification"]) + compact(text))
write("protocol_messages", "orchestrator-output.json", chr(64 + TYPES["OrchestratorOutput"]) + json.dumps(
    {"expects_response": True, "message": "The parser is done; the CLI flag remains.",
     "handoff": json.loads(docs["Handoff"][0])}, separators=(",", ":")))
write("protocol_messages", "policy.txt", chr(64 + 31) + "mode ask; allow read; allow grep; deny bash(rm -rf*); ask bash(git push*); deny write(**/.env)")
write("protocol_messages", "budget-command.txt", chr(64 + 31) + "/budget session $12.50")

# handoff_packet: 0 an Orchestrator's packet, 1 a predecessor's as a summons
# carries it, 2 an Arbiter's packet.
handoff = json.loads(docs["Handoff"][0])
summon = json.loads(docs["Summon"][0])
write("handoff_packet", "orchestrator-packet.json", "0" + json.dumps(handoff, separators=(",", ":")))
prior = summon.get("handoff") or {"number": 1, "orch_id": "0197c2a6-0b7d-7e21-8f90-4c3b2a1d0e9f", "packet": handoff}
write("handoff_packet", "prior-handoff.json", "1" + json.dumps(prior, separators=(",", ":")))
write("handoff_packet", "arbiter-packet.json", "2" + json.dumps({
    "goal": "Build the ten items of the brief, in Rust, with tests.",
    "preferences": ["Rust only", "no new dependencies"],
    "decisions": [{"decision": "TOML for the config", "why": "the human asked"}],
    "orchestrators": [{"number": 1, "line": "wrote the parser (T1); handed off at 85 %"}],
    "open": [{"id": "T2", "what": "the CLI flag"}, {"id": "T3", "what": "docs"}],
    "active": {"number": 2, "doing": "the CLI flag"}}, separators=(",", ":")))

# anthropic_sse / openai_stream: the first byte is the chunk size (modulo
# 64, plus 1): "?" 64 bytes, " " 33, "A" 2.
fixtures = ROOT / "llm" / "tests" / "fixtures"
for target, prefix in [("anthropic_sse", "anthropic_"), ("openai_stream", "openai_")]:
    for i, f in enumerate(sorted(fixtures.glob(prefix + "*.sse"))):
        name = f.name[len(prefix):].replace("_", "-")
        write(target, name, "? A"[i % 3] + f.read_text())

# tool_args: the first byte picks the tool (index modulo 10 in
# worker/src/fuzz.rs: "2" bash, "3" read … "8" task, "9" an MCP tool).
for name, pick, args in [
    ("bash-cargo-test", "2", {"command": "cargo test --workspace 2>&1 | tail -20", "timeout_ms": 600000}),
    ("bash-git-push", "2", {"command": "cd repo && GIT_TRACE=1 git push origin main"}),
    ("read", "3", {"path": "src/main.rs"}),
    ("write-env", "4", {"path": "./config/.env", "content": "KEY=1\n"}),
    ("edit", "5", {"path": "a.txt", "old_string": "fn main() {}", "new_string": "fn main() {\n}\n", "replace_all": False}),
    ("glob", "6", {"pattern": "**/*.rs", "path": "src"}),
    ("grep", "7", {"pattern": "fn main", "glob": "*.rs", "case_insensitive": True, "max_matches": 20}),
    ("task", "8", {"description": "review", "prompt": "Review src/parse.rs for panics; report file:line."}),
    ("mcp-git-status", "9", {"repo_path": "."}),
]:
    write("tool_args", name + ".json", pick + json.dumps(args, separators=(",", ":")))

# structured_output: 0 an Orchestrator's output, 1 the Arbiter's turn (all
# offered), 2 the Arbiter's turn (a small model's offer), 3 the Arbiter's packet.
out = {"expects_response": True, "message": "The parser is done; T2 remains.", "handoff": handoff}
write("structured_output", "orchestrator-report.json", "0" + json.dumps(out, indent=1))
write("structured_output", "orchestrator-note-fenced.txt", "0" + "```json\n" + json.dumps({"expects_response": False, "message": "Tests pass; going on with the CLI."}) + "\n```\n")
arbiter = docs["ArbiterOutput"][0]
write("structured_output", "arbiter-summon.json", "1" + arbiter)
write("structured_output", "arbiter-reply-lead-in.txt", "2" + "Here is my reply:\n" + json.dumps({"intent": "address_human", "message": "Which format: TOML or YAML?"}))
packet = (CORPUS / "handoff_packet" / "arbiter-packet.json").read_text()[1:]
write("structured_output", "arbiter-packet.json", "3" + packet)

# claude_lines: the Claude Code CLI's `stream-json` lines of one turn.
def lines(*values):
    return "".join(json.dumps(v, separators=(",", ":")) + "\n" for v in values)

init = {"type": "system", "subtype": "init", "session_id": "3f1e2d4c-5b6a-4789-8abc-def012345678", "tools": ["Bash", "Read", "Write", "Edit"], "model": "claude-sonnet-4-5"}
tool_use = {"type": "assistant", "message": {"id": "msg_01", "role": "assistant", "content": [
    {"type": "text", "text": "I will run the tests."},
    {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "cargo test"}}],
    "usage": {"input_tokens": 12, "cache_read_input_tokens": 30000, "cache_creation_input_tokens": 2048, "output_tokens": 40}}}
result_line = {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "test result: FAILED", "is_error": True}]}}
structured = {"type": "assistant", "message": {"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_02", "name": "StructuredOutput", "input": {"expects_response": True, "message": "done"}}],
    "usage": {"input_tokens": 40, "cache_read_input_tokens": 32000, "output_tokens": 12}}}
result = {"type": "result", "subtype": "success", "is_error": False, "result": "done", "total_cost_usd": 0.0421,
          "usage": {"input_tokens": 52, "output_tokens": 52}, "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 52, "contextWindow": 200000}},
          "structured_output": {"expects_response": True, "message": "done"}}
error = {"type": "result", "subtype": "error_during_execution", "is_error": True, "api_error_status": 529, "terminal_reason": "overloaded", "result": "Overloaded", "total_cost_usd": 0.01}
write("claude_lines", "turn-tool-and-structured-output.jsonl", lines(init, tool_use, result_line, structured, result))
write("claude_lines", "api-error.jsonl", lines(init, error))
write("claude_lines", "not-json.jsonl", lines(init) + "Error: the CLI crashed\n")

# codex_lines: the Codex CLI's `exec --json` lines of one turn.
started = {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"}
cmd_start = {"type": "item.started", "item": {"id": "item_1", "type": "command_execution", "command": "bash -lc 'cargo test'", "status": "in_progress"}}
cmd_done = {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "bash -lc 'cargo test'", "aggregated_output": "ok", "exit_code": 0, "status": "completed"}}
change = {"type": "item.completed", "item": {"id": "item_2", "type": "file_change", "changes": [{"path": "src/main.rs", "kind": "update"}, {"path": "src/cli.rs", "kind": "add"}], "status": "completed"}}
mcp = {"type": "item.started", "item": {"id": "item_3", "type": "mcp_tool_call", "server": "git", "tool": "git_status", "status": "in_progress"}}
message = {"type": "item.completed", "item": {"id": "item_4", "type": "agent_message", "text": json.dumps({"expects_response": True, "message": "done"})}}
completed = {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}}
failed = {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}}
write("codex_lines", "turn-command-and-edit.jsonl", lines(started, {"type": "turn.started"}, cmd_start, cmd_done, change, mcp, message, completed))
write("codex_lines", "failed.jsonl", lines(started, {"type": "turn.started"}, {"type": "error", "message": "Reconnecting... 1/5"}, failed))
write("codex_lines", "rollout-token-count.jsonl", lines(
    {"timestamp": "2025-10-01T10:00:00.000Z", "type": "session_meta", "payload": {"id": started["thread_id"]}},
    {"timestamp": "2025-10-01T10:00:05.000Z", "type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 24763}, "last_token_usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}}}},
    completed, {"type": "turn.completed", "usage": {"input_tokens": 50000, "cached_input_tokens": 49000, "output_tokens": 300}}))

# web_inputs: 0 headers and query, 1 a form or query string, 2 a session's log.
write("web_inputs", "bearer-and-cookies.txt", "0Bearer an-access-token-of-32-characters\narbiter_login=abc; theme=dark\n__Host-arbiter_login=def")
write("web_inputs", "query-with-token.txt", "0token=an-access-token-of-32-characters&musings=1&token=x")
write("web_inputs", "send-form.txt", "1csrf=3q2-7w&text=%2Fallow+3+%3Cb%3Ebold%3C%2Fb%3E")
write("web_inputs", "approve-form.txt", "1csrf=3q2-7w&approval=3&answer=always")
log = [json.loads(b) for b in docs["LogEntry"]]
hostile = dict(log[-1])
hostile["seq"] = 15
hostile["body"] = {"type": "arbiter", "text": "<script>alert(1)</script> \u202eevil\u001b[2J <img src=x onerror=alert(2)>"}
status = json.loads(docs["SessionStatus"][0])
delta = json.loads(docs["ArbiterDelta"][0])
orch = json.loads(docs["OrchestratorStatus"][0])
write("web_inputs", "session-log.jsonl", "2" + lines(status, *log, orch, delta, hostile))

# mcp_inputs: 0 the server's side (0 a tool call's arguments, 1 a log entry
# to read), 1 the client's (0 a server's tool list, 1 a call's result).
write("mcp_inputs", "send-args.json", "00" + json.dumps({"session": "0197c2a4-5f1e-7b3a-9c41-2d8e6f0a1b37", "text": "/deny 2 not on main"}))
write("mcp_inputs", "read-args.json", "00" + json.dumps({"session": " 0197c2a4 ", "since_seq": 12, "musings": True}))
write("mcp_inputs", "start-args.json", "00" + json.dumps({"brief": "Write hello.py and its tests.", "workspace": "hello"}))
write("mcp_inputs", "log-entry.json", "01" + json.dumps(log[-1]))
write("mcp_inputs", "tools-list.json", "10" + json.dumps({"tools": [
    {"name": "git_status", "description": "Shows the working tree status", "inputSchema": {"type": "object", "properties": {"repo_path": {"type": "string"}}, "required": ["repo_path"]}},
    {"name": "get.time/now", "title": "Time", "inputSchema": {"type": "object"}},
    {"name": "x" * 80, "inputSchema": {"type": "object"}}]}))
write("mcp_inputs", "call-result.json", "11" + json.dumps({"content": [
    {"type": "text", "text": "On branch main\nnothing to commit"},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "a"}}], "isError": False}))
write("mcp_inputs", "call-error.json", "11" + json.dumps({"content": [], "structuredContent": {"error": "no repo"}, "isError": True}))

# protocol_records: 0 the worker's records, 1 the coordinator's, 2 an
# archive (then 0: the gzip object as stored, 1: its lines).
archive = lines({"kind": "header", "v": 3, "session_id": status["session_id"], "archived_at": "2025-06-30T15:00:00Z", "status": status},
                *({"kind": "log", "entry": e} for e in log),
                {"kind": "orch_state", "orch_id": "0197c2a6-0b7d-7e21-8f90-4c3b2a1d0e9f", "record": {"rev": 3}})
write("protocol_records", "archive-lines.jsonl", "21" + archive)
write("protocol_records", "archive.gz", b"20" + gzip.compress(archive.encode(), mtime=0))
