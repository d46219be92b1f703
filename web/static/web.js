// arbiter-web: live updates for its pages. Everything from the server is
// set as text (textContent), never as markup; the page works without this
// script, refreshed by hand.
"use strict";

function csrf() {
  const meta = document.querySelector('meta[name="csrf"]');
  return meta ? meta.content : "";
}

function lineItem(line) {
  const li = document.createElement("li");
  li.className = line.class;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = line.speaker;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = line.text;
  li.append(who, text);
  return li;
}

function nearBottom() {
  return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
}

function followSession(log) {
  let next = Number(log.dataset.next);
  const musings = log.dataset.musings === "1";
  const tail = document.getElementById("tail");
  const status = document.getElementById("status");
  const cost = document.getElementById("cost");
  const approvals = document.getElementById("approvals");
  const url = log.dataset.events + "?from=" + next + (musings ? "&musings=1" : "");
  const events = new EventSource(url);
  events.addEventListener("entry", (e) => {
    const entry = JSON.parse(e.data);
    if (entry.i < next) return;
    next = entry.i + 1;
    if (entry.line.musing && !musings) return;
    const follow = nearBottom();
    log.append(lineItem(entry.line));
    if (follow) window.scrollTo(0, document.body.scrollHeight);
  });
  events.addEventListener("tail", (e) => {
    tail.replaceChildren(...JSON.parse(e.data).map(lineItem));
  });
  events.addEventListener("status", (e) => {
    const s = JSON.parse(e.data);
    status.textContent = s.lines.join("\n");
    cost.textContent = s.cost ? "Spent " + s.cost : "";
    let banner = document.getElementById("banner");
    if (!s.connected && !banner) {
      banner = document.createElement("p");
      banner.id = "banner";
      banner.className = "trouble";
      banner.textContent = "NATS is not reachable: reconnecting.";
      log.before(banner);
    } else if (s.connected && banner) {
      banner.remove();
    }
  });
  events.addEventListener("approvals", (e) => {
    const forms = JSON.parse(e.data).map((w) => {
      const form = document.createElement("form");
      form.method = "post";
      form.action = approvals.dataset.action;
      form.className = "approval live";
      for (const [name, value] of [["csrf", csrf()], ["approval", String(w.approval)]]) {
        const input = document.createElement("input");
        input.type = "hidden";
        input.name = name;
        input.value = value;
        form.append(input);
      }
      const text = document.createElement("span");
      text.className = "text";
      text.textContent = "? Approval " + w.approval + ": " + w.text;
      form.append(text);
      for (const [value, label] of [["allow", "Allow"], ["always", "Always"], ["deny", "Deny"]]) {
        const button = document.createElement("button");
        button.type = "submit";
        button.name = "answer";
        button.value = value;
        button.textContent = label;
        form.append(button);
      }
      return form;
    });
    approvals.replaceChildren(...forms);
  });
  events.addEventListener("reload", () => window.location.reload());
}

function followSessions(table) {
  const body = table.querySelector("tbody");
  const events = new EventSource(table.dataset.events);
  events.addEventListener("rows", (e) => {
    const rows = JSON.parse(e.data).map((r) => {
      const tr = document.createElement("tr");
      if (r.attention) tr.className = "attention";
      const first = document.createElement("td");
      const a = document.createElement("a");
      a.href = r.href;
      a.textContent = r.id;
      first.append(a);
      tr.append(first);
      for (const value of [r.state, r.last, r.cost, r.context, r.attention]) {
        const td = document.createElement("td");
        td.textContent = value;
        tr.append(td);
      }
      return tr;
    });
    body.replaceChildren(...rows);
  });
}

// Forms marked live are sent in the background: the page stays, the
// stream shows what they did.
document.addEventListener("submit", (e) => {
  const form = e.target;
  if (!form.classList.contains("live")) return;
  e.preventDefault();
  const body = new URLSearchParams(new FormData(form, e.submitter));
  fetch(form.action, {
    method: "POST",
    body,
    headers: { Accept: "application/json" },
    credentials: "same-origin",
  }).then((response) => {
    if (!response.ok) {
      response.text().then((t) => window.alert("Not sent: " + t));
    } else if (form.id === "send") {
      form.querySelector("textarea").value = "";
    }
  });
});

document.addEventListener("keydown", (e) => {
  if (e.target.id === "text" && e.key === "Enter" && !e.shiftKey && !e.altKey) {
    e.preventDefault();
    e.target.form.requestSubmit();
  }
});

document.addEventListener("DOMContentLoaded", () => {
  const log = document.getElementById("log");
  if (log) followSession(log);
  const sessions = document.getElementById("sessions");
  if (sessions) followSessions(sessions);
});
