"""A small Arbiter worker in Python, written from docs/protocol.md alone.

It runs Orchestrators for one pool: it takes summonses from the shared
`pool-<pool>` consumer (the summons is the lease, renewed with +WPI), claims
each Orchestrator from its state records (fenced writes), stores every step
before publishing it, reads inputs the protocol v3 way (input n by a direct
get of its own subject, n = the stored in_seq + 1, woken by core
subscriptions; no consumer per Orchestrator), and ends on release, cancel or
failure. The model is an Anthropic Messages server, called without
tools: every reply must be the JSON of an OrchestratorOutput.

Simplifications (see README.md): no tools, no subagents, no parking, no
context warnings. Inputs and control are read during model calls too.
Settings come from the environment, as `arbiter-worker` reads
them (see the Conformance kit section of docs/protocol.md).
"""

import asyncio
import base64
import json
import os
import re
import signal
import ssl
import sys
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, NotFoundError

PREFIX = "arbiter.v1"
TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
WRONG_LAST_SEQUENCE = 10071
POLL = 2.0  # a wake-up lost (a reconnect) waits at most this long
LAST_LOOK = 1.0  # an input announced and not stored yet is looked for this long
BLOBS = "arbiter_orch_blobs"  # object store for records too large for a message
MAX_RECORD = 900_000
SYSTEM_PROMPT = (
    "You are an Orchestrator. Reply with JSON only, exactly "
    '{"expects_response": <bool>, "message": "<text>"}: expects_response is '
    "true when you need an answer before going on."
)


def now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def env(name, default=None):
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def connect_options(worker_id):
    """How to reach NATS, from the variables arbiter-worker reads: NATS_URL
    (a comma-separated list for a cluster), NATS_CREDS (a .creds file),
    NATS_CA, NATS_CERT and NATS_KEY (TLS, with the client certificate the
    server verifies), and NATS_INBOX_PREFIX, else the _INBOX_<name> prefix
    the credential may subscribe to (a worker credential allows no other)."""
    options = {"servers": env("NATS_URL", "nats://127.0.0.1:4222").split(","),
               "name": worker_id}
    creds, inbox = env("NATS_CREDS"), env("NATS_INBOX_PREFIX")
    if creds:
        options["user_credentials"] = creds
        inbox = inbox or inbox_of(creds)
    if inbox:
        options["inbox_prefix"] = inbox
    ca, cert, key = env("NATS_CA"), env("NATS_CERT"), env("NATS_KEY")
    if ca or cert:
        tls = ssl.create_default_context(cafile=ca)
        if cert:
            tls.load_cert_chain(cert, key)
        options["tls"] = tls
    return options


def inbox_of(creds):
    """The _INBOX_<name> prefix a .creds file's user may subscribe to, read
    from its JWT (not verified: the server does that); None if it names none."""
    with open(creds) as f:
        lines = [line.strip() for line in f]
    try:
        start = next(i for i, line in enumerate(lines) if "BEGIN NATS USER JWT" in line)
        jwt = next(line for line in lines[start + 1:] if line)
        payload = jwt.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        allowed = claims["nats"]["sub"]["allow"]
    except (StopIteration, IndexError, KeyError, TypeError, ValueError):
        return None
    for subject in allowed:
        prefix = subject[:-2] if subject.endswith(".>") else ""
        if prefix.startswith("_INBOX_") and "*" not in prefix and ">" not in prefix:
            return prefix
    return None


class Fenced(Exception):
    """Another worker holds the lease: stop at once, publish nothing."""


class Stopped(Exception):
    """A release or cancel came."""

    def __init__(self, action):
        super().__init__(action)
        self.action = action


class Worker:
    def __init__(self):
        self.pool = env("ARBITER_POOL", "default")
        self.worker_id = env("ARBITER_WORKER_ID", "worker-" + uuid.uuid4().hex)
        self.lease = float(env("ARBITER_LEASE_SECS", "6"))
        self.slots = asyncio.Semaphore(int(env("ARBITER_MAX_ORCHESTRATORS", "4")))
        self.slots_total = int(env("ARBITER_MAX_ORCHESTRATORS", "4"))
        self.root = env("ARBITER_WORKSPACE_ROOT", "workspaces")
        self.base_url = env("ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")
        self.api_key = env("ANTHROPIC_API_KEY", "")
        self.model = env("ORCHESTRATOR_MODEL", "anthropic:claude-sonnet-4-5").split(":", 1)[-1]
        self.repairs = int(env("ORCHESTRATOR_SCHEMA_REPAIRS", "2"))
        self.max_notes = int(env("ORCHESTRATOR_MAX_NOTES", "8"))
        self.running = {}  # orch_id -> Orchestrator
        self.stop = asyncio.Event()

    async def run(self):
        async def error(e):  # a denial by the server is said, not swallowed
            print(f"NATS error: {e}", file=sys.stderr, flush=True)

        self.nc = await nats.connect(**connect_options(self.worker_id), error_cb=error)
        self.js = self.nc.jetstream()
        for stream in ("ARBITER_ORCH", "ARBITER_SUMMONS", "ARBITER_ORCH_STATE"):
            await self.js.stream_info(stream)
        durable = f"pool-{self.pool}"
        # `name` as well as `durable_name`: nats-py then asks on the subject
        # that names the filter ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>),
        # the one a worker credential may use (not CONSUMER.DURABLE.CREATE).
        config = ConsumerConfig(
            name=durable,
            durable_name=durable,
            filter_subject=f"{PREFIX}.summon.{self.pool}",
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.lease,
            max_ack_pending=100_000,
        )
        try:
            await self.js.add_consumer("ARBITER_SUMMONS", config)  # creates or updates
        except (APIError, nats.errors.TimeoutError, asyncio.TimeoutError) as e:
            # A denial shows as a timeout (and a NATS error said above).
            print(f"could not set the pool consumer's lease: {e!r}", file=sys.stderr)
        info = await self.js.consumer_info("ARBITER_SUMMONS", durable)
        self.ack_wait = info.config.ack_wait or self.lease
        sub = await self.js.pull_subscribe_bind(durable=durable, stream="ARBITER_SUMMONS")
        await self.presence()
        print(f"worker {self.worker_id} ready, pool {self.pool}", file=sys.stderr, flush=True)
        while not self.stop.is_set():
            await self.slots.acquire()
            try:
                msgs = await sub.fetch(1, timeout=1)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                self.slots.release()
                continue
            for msg in msgs:
                asyncio.create_task(self.summons(msg))

    async def presence(self):
        async def ping(msg):
            await msg.respond(json.dumps({
                "type": "io.nats.micro.v1.ping_response",
                "name": "arbiter-worker",
                "id": self.worker_id,
                "version": "0.1.0",
                "metadata": {
                    "worker_id": self.worker_id,
                    "pool": self.pool,
                    "slots_total": str(self.slots_total),
                    "protocol": f"{PREFIX} v1",
                },
            }).encode())

        for subject in ("$SRV.PING", "$SRV.PING.arbiter-worker"):
            await self.nc.subscribe(subject, cb=ping)

    async def summons(self, msg):
        try:
            try:
                summons = json.loads(msg.data)
                valid = TOKEN.match(summons["orch_id"]) and TOKEN.match(summons["session_id"])
            except (ValueError, KeyError, TypeError):
                valid = False
            if not valid:
                print("malformed summons rejected", file=sys.stderr)
                await msg.term()
                return
            seq = msg.metadata.sequence.stream
            mine = self.running.get(summons["orch_id"])
            if mine is not None:
                if mine.summons_seq == seq:
                    mine.lease_msg = msg  # delivered again to its holder: renew under it
                    await msg.in_progress()
                else:
                    await msg.ack()  # a duplicate summons
                return
            await Orchestrator(self, summons, msg, seq).run()
        except Exception as e:  # one Orchestrator's trouble never stops the worker
            print(f"orchestrator error: {e!r}", file=sys.stderr, flush=True)
        finally:
            self.slots.release()


class Orchestrator:
    def __init__(self, worker, summons, msg, seq):
        self.w, self.js, self.nc = worker, worker.js, worker.nc
        self.id = summons["orch_id"]
        self.session_id = summons["session_id"]
        self.number = summons["number"]
        self.brief = summons["brief"]
        self.lease_msg, self.summons_seq = msg, seq
        self.lease_id = uuid.uuid4().hex
        self.state_subject = f"{PREFIX}.orch.{self.id}.state"
        self.fenced = False
        self.wake = asyncio.Event()  # set by a message on an input or control subject
        self.subs = []
        self.ctl_seq = 0  # the control message last read
        self.passed_over = {}  # n -> stream seq of a malformed input n passed over

    # --- state records -------------------------------------------------
    async def records(self):
        try:
            last = await self.js.get_last_msg("ARBITER_ORCH_STATE", self.state_subject)
        except NotFoundError:
            return [], 0
        # One direct get per record (the next on the subject from a stream
        # seq): the claim makes no consumer on the server.
        out, seq = [], 1
        while seq <= last.seq:
            m = await self.js.get_msg("ARBITER_ORCH_STATE", seq=seq, subject=self.state_subject,
                                      next=True, direct=True)
            record = json.loads(m.data)
            if "blob" in record:  # a pointer: the record is an object
                store = await self.js.object_store(BLOBS)
                record = json.loads((await store.get(record["blob"])).data)
            out.append(record)
            seq = m.seq + 1
        return out, last.seq

    async def write(self, append, outbox):
        rev = self.rev + 1
        record = {
            "v": 1, "orch_id": self.id, "session_id": self.session_id, "number": self.number,
            "rev": rev, "worker_id": self.w.worker_id, "summons_seq": self.summons_seq,
            "append": append, "snapshot": self.snap, "outbox": outbox, "at": now(),
        }
        data = json.dumps(record).encode()
        if len(data) > min(MAX_RECORD, self.nc.max_payload - 65536):
            # Too large for a message: the whole record as an object, then a pointer.
            name = f"{self.id}.{rev}.{self.lease_id}"
            store = await self.js.object_store(BLOBS)
            await store.put(name, data)
            data = json.dumps({
                "v": 1, "orch_id": self.id, "session_id": self.session_id,
                "number": self.number, "rev": rev, "worker_id": self.w.worker_id,
                "blob": name, "at": now(),
            }).encode()
        headers = {
            "Nats-Msg-Id": f"{self.id}:state:{rev}:{self.lease_id}",
            "Nats-Expected-Last-Subject-Sequence": str(self.last_seq),
        }
        try:
            ack = await self.js.publish(self.state_subject, data, headers=headers)
        except APIError as e:
            if e.err_code == WRONG_LAST_SEQUENCE:
                self.fenced = True
                raise Fenced() from e
            raise
        self.rev, self.last_seq = rev, ack.seq

    # --- publishing ----------------------------------------------------
    def message(self, event):
        self.snap["out_seq"] += 1
        # session_inputs: this worker reads inputs as log entries, so the
        # coordinator stops sending them on orch.<id>.in too.
        return {"v": 1, "session_id": self.session_id, "orch_id": self.id,
                "seq": self.snap["out_seq"], "event": event, "sent_at": now(),
                "session_inputs": True}

    async def publish(self, outbox):
        subject = f"{PREFIX}.orch.{self.id}.out"
        for m in outbox:
            await self.js.publish(subject, json.dumps(m).encode(),
                                  headers={"Nats-Msg-Id": f"{self.id}:out:{m['seq']}"})

    async def status(self, state):
        await self.nc.publish(f"{PREFIX}.orch.{self.id}.status", json.dumps({
            "v": 1, "session_id": self.session_id, "orch_id": self.id, "number": self.number,
            "worker_id": self.w.worker_id, "state": state, "context_pct": 0.0,
            "context_tokens": 0, "context_budget": 200000, "current_tool": None,
            "tool_count": 0, "parked": False, "at": now(),
        }).encode())

    def status_state(self):
        phase = self.snap["phase"]
        return "stopped" if phase == "ended" else phase

    # --- the lease -----------------------------------------------------
    async def renew(self):
        while True:
            await asyncio.sleep(self.w.ack_wait / 3)
            try:
                last = await self.js.get_last_msg("ARBITER_ORCH_STATE", self.state_subject)
                msg_id = (last.headers or {}).get("Nats-Msg-Id", "")
                if not msg_id.endswith(self.lease_id):
                    self.fenced = True
                    self.task.cancel()
                    return
                await self.lease_msg.in_progress()
            except Exception as e:
                print(f"renewal failed: {e!r}", file=sys.stderr)

    async def heartbeat(self):
        while True:
            await self.status(self.status_state())
            await asyncio.sleep(2)

    # --- running -------------------------------------------------------
    async def run(self):
        records, self.last_seq = await self.records()
        if records:
            last = records[-1]
            if last["snapshot"].get("phase") == "ended":
                await self.lease_msg.ack()
                return
            recorded = last.get("summons_seq", 0)
            if recorded and recorded != self.summons_seq:
                try:
                    await self.js.get_msg("ARBITER_SUMMONS", recorded)
                    await self.lease_msg.ack()  # the recorded summons is live: a duplicate
                    return
                except NotFoundError:
                    pass
            self.transcript = [m for r in records for m in r.get("append", [])]
            self.snap, self.rev = last["snapshot"], last["rev"]
            outbox, append = last.get("outbox", []), []
        else:
            self.transcript, self.rev = [], 0
            self.snap = {"phase": "working", "out_seq": 0, "in_seq": 0, "inbox": [],
                         "tool_count": 0, "notes_in_a_row": 0, "repairs": 0,
                         "context_tokens": 0}
            outbox, append = [], [{"role": "user", "content": [{"type": "text", "text": self.brief}]}]
            self.transcript = list(append)
        self.w.running[self.id] = self
        try:
            try:
                await self.write(append, outbox)  # the claim
            except Fenced:
                await self.lease_msg.nak(delay=self.w.lease)
                return
            await self.republish(outbox)
            os.makedirs(os.path.join(self.w.root, self.session_id), exist_ok=True)
            await self.open_inputs()
            self.task = asyncio.current_task()
            renewer = asyncio.create_task(self.renew())
            beat = asyncio.create_task(self.heartbeat())
            try:
                await self.loop()
            except (Fenced, asyncio.CancelledError):
                self.fenced = True
            finally:
                renewer.cancel()
                beat.cancel()
            if self.fenced:
                return
            await self.status("stopped")
        finally:
            for sub in self.subs:
                await sub.unsubscribe()
            self.w.running.pop(self.id, None)

    async def republish(self, outbox):
        try:
            # Outputs live in ARBITER_ORCH_STATE; the last on `.out` is a bare
            # output, or a native worker's state record whose outbox is them.
            last = json.loads(
                (await self.js.get_last_msg("ARBITER_ORCH_STATE", f"{PREFIX}.orch.{self.id}.out")).data)
            done = max((m["seq"] for m in last["outbox"]), default=0) if "outbox" in last else last["seq"]
        except NotFoundError:
            done = 0
        await self.publish([m for m in outbox if m["seq"] > done])

    async def open_inputs(self):
        """Core subscriptions that only wake the reader, made before anything is read."""
        async def woken(_msg):
            self.wake.set()

        for subject in (f"{PREFIX}.session.{self.session_id}.in.{self.id}.*",
                        f"{PREFIX}.orch.{self.id}.ctl"):
            self.subs.append(await self.nc.subscribe(subject, cb=woken))

    async def loop(self):
        try:
            while True:
                if self.snap["phase"] == "working":
                    await self.turn()
                else:
                    await self.wait_for_input()
                if self.snap["phase"] == "ended":
                    break
        except Stopped as stop:
            reason = "released" if stop.action == "release" else "cancelled"
            self.snap["phase"], self.snap["reason"] = "ended", reason
            await self.write([], [])
            await self.status("stopped")
            await self.end()
            return
        await self.end()

    async def end(self):
        """The end is stored: free the lease."""
        await self.status("stopped")
        await self.lease_msg.ack_sync()

    # --- inputs and control ----------------------------------------------
    async def take_pending(self, wait):
        """Reads control, then inputs in_seq + 1, + 2 … from the stream, and
        returns the texts taken, in seq order (in_seq moves on; a record that
        stores it follows). With none there, waits up to `wait` seconds for a
        wake-up. Nothing is acked: what was taken is the stored in_seq."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        look = None  # after a wake-up that found nothing: the next look's delay
        while True:
            self.wake.clear()
            try:
                await self.read_control()
                taken = await self.read_inputs()
            except (nats.errors.Error, asyncio.TimeoutError) as e:
                # A timeout, an API error, or no responders (a cluster electing
                # the stream's leader): read again, the Orchestrator goes on.
                print(f"reading inputs failed ({e!r}); reading again", file=sys.stderr)
                taken = []
                await asyncio.sleep(0.25)
            left = deadline - loop.time()
            if taken or left <= 0:
                return taken
            try:
                await asyncio.wait_for(self.wake.wait(), min(left, look or POLL))
                look = 0.001  # the server may store it a moment after the wake-up
            except asyncio.TimeoutError:
                if look is not None:
                    look = look * 2 if look < LAST_LOOK else None

    async def read_control(self):
        """The last message on .ctl: a release or cancel stops the Orchestrator."""
        try:
            m = await self.js.get_last_msg("ARBITER_ORCH", f"{PREFIX}.orch.{self.id}.ctl",
                                           direct=True)
        except NotFoundError:
            return
        if m.seq == self.ctl_seq:
            return
        self.ctl_seq = m.seq
        try:
            action = json.loads(m.data)["action"]
        except (ValueError, KeyError, TypeError):
            print("malformed control passed over", file=sys.stderr)
            return
        if action in ("release", "cancel"):
            raise Stopped(action)

    async def read_inputs(self):
        taken = []
        while True:
            n = self.snap["in_seq"] + 1
            found = await self.input_at(n)
            if found is None:
                return taken
            stream_seq, text = found
            if text is None:  # not input n: wait for the next message on its subject
                if self.passed_over.get(n) != stream_seq:
                    print(f"malformed input passed over (input {n})", file=sys.stderr)
                    self.passed_over[n] = stream_seq
                return taken
            self.passed_over.pop(n, None)
            self.snap["in_seq"] = n
            taken.append(text)

    async def input_at(self, n):
        """Input n: (its stream seq, its text), text None when the newest
        message on its subject is not input n; None when there is none yet."""
        subject = f"{PREFIX}.session.{self.session_id}.in.{self.id}.{n}"
        try:
            m = await self.js.get_last_msg("ARBITER_SESSIONS", subject, direct=True)
        except NotFoundError:
            return None
        try:
            body = json.loads(m.data)["body"]
            if (body["type"] != "arbiter_to_orchestrator" or body["orch_id"] != self.id
                    or int(body["input_seq"]) != n):
                return m.seq, None
            return m.seq, str(body["text"])
        except (ValueError, KeyError, TypeError):
            return m.seq, None

    async def wait_for_input(self):
        if self.snap.get("inbox"):  # stored while the model was busy
            taken = []
        else:
            taken = await self.take_pending(POLL)
            if not taken:
                return
        text = "\n\n".join(self.snap.get("inbox", []) + taken)
        self.snap["inbox"] = []
        message = {"role": "user", "content": [{"type": "text", "text": text}]}
        self.transcript.append(message)
        self.snap["phase"], self.snap["notes_in_a_row"] = "working", 0
        await self.write([message], [])

    # --- the model -------------------------------------------------------
    async def turn(self):
        # Control that came meanwhile ends the turn before it starts.
        taken = await self.take_pending(0)
        if taken:
            self.snap.setdefault("inbox", []).extend(taken)
            await self.write([], [])
        if self.snap.get("inbox"):
            text = "\n\n".join(self.snap["inbox"])
            self.snap["inbox"] = []
            self.transcript.append({"role": "user", "content": [{"type": "text", "text": text}]})
            pending_append = [self.transcript[-1]]
        else:
            pending_append = []
        try:
            raw = await self.call_watching(pending_append)
        except ModelError as e:
            error = {"kind": "model", "role": "orchestrator", "class": e.kind, "message": str(e)}
            return await self.fail(error, pending_append)
        reply = {"role": "assistant", "content": [{"type": "text", "text": raw}]}
        self.transcript.append(reply)
        output, problem = parse_output(raw)
        if output is None:
            if self.snap["repairs"] < self.w.repairs:
                self.snap["repairs"] += 1
                repair = {"role": "user", "content": [{"type": "text", "text":
                          f"Your reply was not valid: {problem}. Reply with the JSON only."}]}
                self.transcript.append(repair)
                return await self.write(pending_append + [reply, repair], [])
            error = {"kind": "schema_violation", "role": "orchestrator",
                     "attempts": self.snap["repairs"] + 1, "detail": problem}
            return await self.fail(error, pending_append + [reply])
        self.snap["repairs"] = 0
        expects = output["expects_response"]
        if not expects:
            self.snap["notes_in_a_row"] += 1
            if self.snap["notes_in_a_row"] >= self.w.max_notes:
                expects = True
        event = {"type": "output", "expects_response": expects, "message": output["message"]}
        message = self.message(event)
        self.snap["phase"] = "waiting" if expects else "working"
        if not expects:
            note = {"role": "user", "content": [{"type": "text", "text":
                    "Your note was sent. Continue your work."}]}
            self.transcript.append(note)
            pending_append = pending_append + [reply, note]
        else:
            pending_append = pending_append + [reply]
        await self.write(pending_append, [message])  # stored first ...
        await self.publish([message])  # ... then published
        await self.status(self.status_state())

    async def call_watching(self, pending_append):
        """Calls the model. Meanwhile inputs are stored into the inbox at once
        (with `pending_append`, which is then emptied: it is stored), and a
        release or cancel raises Stopped at once: the reply is never used."""
        call = asyncio.ensure_future(asyncio.to_thread(self.call_model))
        while not call.done():
            poll = asyncio.ensure_future(self.take_pending(0.2))
            await asyncio.wait({call, poll}, return_when=asyncio.FIRST_COMPLETED)
            taken = await poll  # a read is never dropped: it may have moved in_seq
            if taken:
                self.snap.setdefault("inbox", []).extend(taken)
                await self.write(list(pending_append), [])
                pending_append.clear()
        return call.result()

    async def fail(self, error, append):
        message = self.message({"type": "failed", "error": error})
        self.snap["phase"], self.snap["reason"] = "ended", "failed"
        await self.write(append, [message])
        await self.publish([message])

    def call_model(self):
        messages = []
        for m in self.transcript:  # a message with the role before it continues it
            if messages and messages[-1]["role"] == m["role"]:
                messages[-1] = {"role": m["role"], "content": messages[-1]["content"] + m["content"]}
            else:
                messages.append(m)
        body = json.dumps({"model": self.w.model, "max_tokens": 4096, "system": SYSTEM_PROMPT,
                           "messages": messages}).encode()
        request = urllib.request.Request(
            self.w.base_url + "/v1/messages", data=body, method="POST",
            headers={"content-type": "application/json", "x-api-key": self.w.api_key,
                     "anthropic-version": "2023-06-01"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as e:
            kinds = {400: "invalid_request", 401: "authentication", 403: "permission_denied",
                     429: "rate_limited", 529: "overloaded", 503: "overloaded"}
            raise ModelError(kinds.get(e.code, "api"), f"HTTP {e.code}: {e.read()[:500]!r}")
        except (urllib.error.URLError, OSError) as e:
            raise ModelError("network", str(e))
        return "".join(b.get("text", "") for b in answer.get("content", []) if b.get("type") == "text")


class ModelError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def parse_output(raw):
    text = raw.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("{"):] if "{" in text else text
    try:
        value = json.loads(text)
    except ValueError as e:
        return None, f"not JSON ({e})"
    if not isinstance(value, dict) or set(value) != {"expects_response", "message"}:
        return None, "the object must have exactly expects_response and message"
    if not isinstance(value["expects_response"], bool) or not isinstance(value["message"], str):
        return None, "expects_response must be a boolean and message a string"
    return value, None


async def main():
    worker = Worker()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop.set)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
