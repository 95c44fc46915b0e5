// The agentnb chat page: plain JavaScript, no build step, nothing fetched from elsewhere.
//
// Rules it keeps:
// - Open (or reload) a session = fetch its snapshot, then stream after the snapshot's
//   cursor; never rebuild the chat from separate reads. A reconnecting stream goes on
//   from the last event it got (the browser sends Last-Event-ID).
// - Text from the model, a tool or a person goes into the page as text (textContent).
//   The only markup inserted is an assistant reply's `html`, rendered by the server from
//   Markdown with raw HTML disabled.
// - Every button calls one API route; what it answers or refuses shows on the page.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  const json = (value) => {
    if (typeof value === "string") return value;
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  };

  const page = {
    user: null,
    csrf: null,
    agent: null,
    sessionId: null,
    chat: null, // the open session's Chat
    panel: null,
    answered: new Set(), // request ids answered here, until the panel drops them
    searchTimer: null,
    listTimer: null, // a pending reload of the session list
  };

  // -- talking to the service ---------------------------------------------------------------

  class Problem extends Error {
    constructor(status, body) {
      super((body && body.detail) || `HTTP ${status}`);
      this.status = status;
      this.type = (body && body.type) || "Error";
    }
  }

  async function api(method, path, body, headers) {
    const init = { method, credentials: "same-origin", headers: Object.assign({}, headers) };
    if (method !== "GET" && page.csrf) init.headers["X-CSRF-Token"] = page.csrf;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new Problem(0, { type: "Unreachable", detail: "the service cannot be reached; is it running?" });
    }
    if (response.status === 204) return null;
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      if (response.status === 401) showSignIn();
      throw new Problem(response.status, data);
    }
    return data;
  }

  const sessionPath = (suffix) => `/v1/sessions/${encodeURIComponent(page.sessionId)}${suffix || ""}`;

  // Words for the notices: a task is named by what the person asked, not by its turn id.
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const quote = (text) => {
    const line = String(text || "").trim().split("\n")[0];
    return `“${line.length > 60 ? `${line.slice(0, 59)}…` : line}”`;
  };
  function taskName(turnId, fallback) {
    const tasks = (page.panel && page.panel.tasks) || [];
    const task = tasks.find((t) => t.turn_id === turnId);
    if (task && task.input) return quote(task.input);
    return fallback ? quote(fallback) : "the task";
  }

  function showError(e) {
    $("error").textContent = e ? `${e.type || "Error"}: ${e.message}` : "";
  }

  function say(text) {
    const notice = $("notice");
    notice.textContent = text || "";
    notice.hidden = !text;
  }

  function banner(text, ok) {
    const node = $("banner");
    node.textContent = text || "";
    node.hidden = !text;
    node.classList.toggle("ok", !!ok);
  }

  // -- signing in ---------------------------------------------------------------------------

  function showSignIn() {
    closeStream();
    $("app").hidden = true;
    $("sign-in").hidden = false;
    $("token").focus();
  }

  async function signIn(event) {
    event.preventDefault();
    $("sign-in-error").textContent = "";
    try {
      const me = await api("POST", "/v1/auth/sign-in", { token: $("token").value.trim() });
      $("token").value = "";
      await start(me);
    } catch (e) {
      $("sign-in-error").textContent = e.message;
    }
  }

  async function signOut() {
    try { await api("POST", "/v1/auth/sign-out"); } catch (e) { /* signed out anyway */ }
    page.csrf = null;
    showSignIn();
  }

  async function start(me) {
    page.user = me.user_id;
    page.csrf = me.csrf;
    $("sign-in").hidden = true;
    $("app").hidden = false;
    $("user").textContent = me.auth === "none" ? "" : `signed in as ${me.user_id}`;
    $("sign-out").hidden = me.auth !== "sign-in";
    try {
      page.agent = await api("GET", "/v1/agent");
      $("agent-name").textContent = page.agent.name;
    } catch (e) { showError(e); }
    await loadSessions();
    const wanted = new URLSearchParams(location.hash.slice(1)).get("s");
    if (wanted) await openSession(wanted);
  }

  // -- the session list ---------------------------------------------------------------------

  async function loadSessions() {
    const params = new URLSearchParams({ limit: "100" });
    const search = $("search").value.trim();
    if (search) params.set("search", search);
    let data;
    try {
      data = await api("GET", `/v1/sessions?${params}`);
    } catch (e) { showError(e); return; }
    const list = $("sessions");
    list.replaceChildren();
    for (const info of data.sessions) {
      const id = info.key.session_id;
      const row = el("li", "session-row");
      row.dataset.id = id;
      if (id === page.sessionId) row.classList.add("current");
      row.append(el("span", "row-title", info.title || "untitled session"));
      row.title = id;
      const meta = el("span", "small muted");
      meta.append(el("span", `badge ${info.status}`, info.status), " ", plural(info.counts.turns, "turn"));
      row.append(meta);
      row.addEventListener("click", () => openSession(id));
      list.append(row);
      if (id === page.sessionId) showTitle(info.title);
    }
  }

  // The header names the session as the list does: its title, else its first task's first
  // line (known once a task is submitted, so the list's next load fills it in).
  function showTitle(title) {
    const node = $("title");
    node.textContent = title || "untitled session";
    node.title = page.sessionId || "";
  }

  // The list's counts, titles and statuses change with turns: reload it when the open
  // session's status changes, at most once a second.
  function refreshSessionsSoon() {
    if (page.listTimer) return;
    page.listTimer = setTimeout(() => { page.listTimer = null; loadSessions(); }, 1000);
  }

  async function newSession() {
    try {
      const info = await api("POST", "/v1/sessions", {});
      await loadSessions();
      await openSession(info.key.session_id);
    } catch (e) { showError(e); }
  }

  // -- a chat: snapshot, then the stream after its cursor ---------------------------------------
  //
  // One Chat per followed session: the open session's, and one inside each sub-agent card
  // whose child's chat is expanded (the child's own snapshot and stream, same rules).

  class Chat {
    constructor(list, path, nested) {
      this.list = list; // the element the items go in
      this.path = path; // /v1/sessions/<id>[/children/<call id>...]
      this.nested = nested; // {head} for a child's chat inside a card; null for the main one
      this.sessionId = null; // the session's own id (a child's: "<parent>/<call id>")
      this.cursor = null;
      this.source = null;
      this.items = new Map(); // id -> {data, node, nested}
      this.live = new Map(); // model_call_id -> {committed: n, pieces: Map(piece -> text)}
      this.children = {}; // call id -> the child's live status (the panel's `children`)
      this.reconnecting = false;
      this.closed = false;
    }

    async open() {
      const snap = await api("GET", `${this.path}?html=true&messages=false`);
      if (this.closed) return null;
      this.sessionId = snap.session_id;
      this.clear();
      for (const item of snap.items) this.putItem(item, null, true);
      this.cursor = snap.cursor;
      this.stream(snap.cursor);
      return snap;
    }

    clear() {
      for (const entry of this.items.values()) if (entry.nested) entry.nested.chat.close();
      this.items.clear();
      this.live.clear();
      this.list.replaceChildren();
    }

    close() {
      this.closed = true;
      if (this.source) this.source.close();
      this.source = null;
      for (const entry of this.items.values()) if (entry.nested) entry.nested.chat.close();
    }

    stream(cursor) {
      const source = new EventSource(`${this.path}/stream?mode=page&after=${encodeURIComponent(cursor)}`);
      this.source = source;
      source.addEventListener("open", () => {
        if (this.nested) return this.headNote("");
        if (this.reconnecting) banner("Reconnected: the chat goes on from where it was.", true);
        this.reconnecting = false;
        setTimeout(() => { if (!this.reconnecting) banner(""); }, 2500);
      });
      source.addEventListener("error", () => {
        if (this.source !== source) return;
        if (source.readyState === EventSource.CLOSED) {
          // Refused (a 4xx): the session is gone, or the sign-in ended.
          this.source = null;
          if (this.nested) return this.headNote("its stream was refused; close and open it again");
          banner("The stream was refused; reloading the session…");
          setTimeout(() => { if (page.chat === this) recover(); }, 2000);
          return;
        }
        this.reconnecting = true;
        if (this.nested) this.headNote("reconnecting…");
        else banner("Connection lost: reconnecting to the server…");
      });
      source.addEventListener("committed", (e) => this.onCommitted(JSON.parse(e.data)));
      source.addEventListener("chunk", (e) => this.onChunk(JSON.parse(e.data)));
      source.addEventListener("state", (e) => this.onState(JSON.parse(e.data)));
      source.addEventListener("end", (e) => {
        const data = JSON.parse(e.data);
        this.close();
        if (this.nested) this.headNote(`its stream ended: ${data.reason}`);
        else banner(`The stream ended: ${data.reason}`);
      });
    }

    headNote(text) {
      if (this.nested) this.nested.note.textContent = text;
    }

    onState(state) {
      this.children = state.children || {};
      for (const entry of this.items.values()) if (entry.data.kind === "subagent") paintChild(this, entry);
      if (this.nested) {
        this.nested.status.textContent = state.status;
        this.nested.status.className = `badge ${state.status}`;
      } else {
        renderPanel(state);
      }
    }

    onCommitted(frame) {
      this.cursor = `${this.sessionId}:${frame.seq}`;
      if (!this.nested) showCursor();
      if (frame.type === "model/dispatch") {
        this.live.delete(frame.data && frame.data.model_call_id);
      } else if (frame.type === "model/chunk" && frame.data) {
        const live = this.liveOf(frame.data.model_call_id);
        live.committed = Math.max(live.committed, frame.data.index + frame.data.pieces);
        for (const piece of [...live.pieces.keys()]) if (piece < live.committed) live.pieces.delete(piece);
      } else if (frame.type === "message/assistant" && frame.data && frame.data.model_call_id) {
        this.live.delete(frame.data.model_call_id);
      }
      if (frame.items) {
        if (frame.reset) this.clear();
        for (const id of frame.removed || []) this.removeItem(id);
        for (const item of frame.items) this.putItem(item, item.after, false);
        this.scrollDown(false);
      }
    }

    liveOf(modelCallId) {
      let live = this.live.get(modelCallId);
      if (!live) {
        live = { committed: 0, pieces: new Map() };
        this.live.set(modelCallId, live);
      }
      return live;
    }

    onChunk(chunk) {
      if (chunk.kind !== "model/chunk" || typeof chunk.text !== "string") return;
      const live = this.liveOf(chunk.model_call_id);
      if (chunk.piece < live.committed) return; // already in a committed frame
      live.pieces.set(chunk.piece, chunk.text);
      const entry = this.items.get(chunk.model_call_id);
      if (entry) this.paintLive(entry);
      this.scrollDown(false);
    }

    liveText(modelCallId) {
      const live = this.live.get(modelCallId);
      if (!live) return "";
      return [...live.pieces.keys()].sort((a, b) => a - b).map((k) => live.pieces.get(k)).join("");
    }

    paintLive(entry) {
      const span = entry.node.querySelector(":scope > .live");
      if (span) span.textContent = this.liveText(entry.data.model_call_id || entry.data.id);
    }

    putItem(item, after, append) {
      const render = renderers[item.kind] || renderGeneric;
      const node = render(item, this);
      node.dataset.id = item.id;
      const known = this.items.get(item.id);
      const entry = { data: item, node, nested: null };
      this.items.set(item.id, entry);
      if (known) {
        if (known.nested) { // an open child's chat stays as it is inside the new card
          const slot = node.querySelector(".child-chat");
          if (slot) {
            slot.replaceWith(known.nested.box);
            entry.nested = known.nested;
            node.open = true;
            const toggle = node.querySelector("button.child-open");
            if (toggle) toggle.textContent = "Close its chat";
          } else {
            known.nested.chat.close();
          }
        }
        known.node.replaceWith(node);
      } else if (append) {
        this.list.append(node);
      } else if (after === null || after === undefined) {
        this.list.prepend(node);
      } else {
        const before = this.items.get(after);
        if (before && before.node.parentNode === this.list) before.node.after(node);
        else this.list.append(node);
      }
      if (item.kind === "message" && item.role === "assistant") this.paintLive(entry);
      if (item.kind === "subagent") paintChild(this, entry);
    }

    removeItem(id) {
      const entry = this.items.get(id);
      if (!entry) return;
      if (entry.nested) entry.nested.chat.close();
      entry.node.remove();
      this.items.delete(id);
    }

    scrollDown(force) {
      const list = this.nested ? null : this.list;
      if (!list) return;
      const near = list.scrollHeight - list.scrollTop - list.clientHeight < 120;
      if (force || near) list.scrollTop = list.scrollHeight;
    }
  }

  async function openSession(id) {
    closeStream();
    page.sessionId = id;
    page.answered.clear();
    location.hash = `s=${encodeURIComponent(id)}`;
    for (const row of document.querySelectorAll(".session-row")) {
      row.classList.toggle("current", row.dataset.id === id);
    }
    showError(null);
    say("");
    $("requests").replaceChildren();
    const chat = new Chat($("items"), `/v1/sessions/${encodeURIComponent(id)}`, null);
    page.chat = chat;
    let snap;
    try {
      snap = await chat.open();
    } catch (e) { showError(e); return; }
    if (!snap || page.chat !== chat) return;
    showTitle(snap.info.title);
    showCursor();
    renderPanel({
      status: snap.status, running: null, resumable: null, parked: null,
      pending: snap.pending, tasks: snap.tasks, queued: snap.tasks.filter((t) => t.status === "queued").length,
    });
    chat.scrollDown(true);
  }

  async function recover() {
    try {
      await api("GET", "/v1/auth/me");
    } catch (e) { return; } // 401 shows the sign-in
    if (page.sessionId) await openSession(page.sessionId);
  }

  function closeStream() {
    if (page.chat) page.chat.close();
    page.chat = null;
  }

  function showCursor() {
    const cursor = page.chat && page.chat.cursor;
    const node = $("cursor");
    node.textContent = cursor ? `event ${cursor.split(":").pop()}` : "";
    node.title = cursor ? "the last event of the session's log shown here; a reload goes on from it" : "";
  }

  // -- items ---------------------------------------------------------------------------------

  const renderers = {
    message: renderMessage,
    tool: renderTool,
    subagent: renderSubagent,
    plan: renderPlan,
    summary: renderSummary,
  };

  function label(text, status) {
    const node = el("div", "label", text);
    if (status && status !== "completed") {
      node.append(" ", el("span", `badge ${status}`, status));
    }
    return node;
  }

  function renderMessage(item) {
    const node = el("div", `item item-${item.role}`);
    if (item.role === "assistant" && !item.text && item.status === "completed" && item.tool_call_ids.length) {
      node.classList.add("quiet"); // a reply that only calls tools: its cards say it all
      return node;
    }
    if (item.role === "assistant") {
      if (["waiting", "streaming", "finishing"].includes(item.status)) node.classList.add("drafting");
      node.append(label("assistant", item.status));
      const md = el("div", "md");
      md.innerHTML = item.html || ""; // rendered by the server: raw HTML disabled, text escaped
      node.append(md, el("span", "live"));
      if (item.error) node.append(el("div", "error", item.error));
      const answer = item.status === "completed" && item.turn_id && item.text && !item.tool_call_ids.length;
      if (answer) node.append(ratingBar(item)); // a reply that also calls tools is a step
    } else {
      const source = item.source && item.source !== "submit" ? ` (${item.source})` : "";
      node.append(label(`${item.role}${source}`), el("div", "text", item.text));
    }
    return node;
  }

  // Thumbs up / down and a comment under an answer: one POST .../turns/{turn}/feedback
  // (session.feedback). What it recorded shows as text (textContent: never markup).
  function ratingBar(item) {
    const bar = el("div", "rating");
    const comment = el("input", "rating-comment");
    comment.type = "text";
    comment.placeholder = "why? (optional)";
    comment.maxLength = 2000;
    const said = el("span", "rated");
    const send = async (score) => {
      const why = comment.value.trim();
      const body = why ? { score, comment: why } : { score };
      const path = sessionPath(`/turns/${encodeURIComponent(item.turn_id)}/feedback`);
      const r = await act(() => api("POST", path, body), () => "Thanks: your rating is recorded.");
      if (r) {
        said.textContent = `recorded as ${score > 0 ? "good" : "bad"}${why ? ": " + why : ""}`;
        comment.value = "";
      }
    };
    const thumb = (cls, text, title, score) => {
      const b = el("button", cls, text);
      b.type = "button";
      b.title = title;
      b.addEventListener("click", () => send(score));
      return b;
    };
    bar.append(
      // words, not emoji: a machine without an emoji font shows those as empty boxes
      thumb("thumb-up", "\u25B2 good", "thumbs up: a good answer", 1),
      thumb("thumb-down", "\u25BC bad", "thumbs down: a bad answer", 0),
      comment,
      said,
    );
    return bar;
  }

  function applyHint(node, item, open) {
    // presentation/hint: "expand" opens a card, "collapse" closes it; else the card's default.
    node.open = item.hint === "expand" ? true : item.hint === "collapse" ? false : open;
  }

  function renderTool(item) {
    const node = el("details", "item tool-card");
    const summary = el("summary");
    summary.append(el("strong", null, item.tool_name || "tool"), " ", el("span", `badge ${item.status}`, item.status));
    node.append(summary);
    applyHint(node, item, ["waiting", "generating", "running"].includes(item.status));
    const args = item.arguments !== null && item.arguments !== undefined ? json(item.arguments) : item.arguments_text;
    if (args) node.append(el("div", "section", "arguments"), el("pre", "arguments", args));
    if (item.progress && item.progress.length) {
      node.append(el("div", "section", "progress"));
      for (const step of item.progress) node.append(el("pre", "progress", json(step)));
    }
    if (item.request) {
      const r = item.request;
      node.append(el("div", "section", `request (${r.kind}): ${r.status}`));
      if (r.prompt) node.append(el("div", "text", r.prompt));
      if (r.answer && Object.keys(r.answer).length) node.append(el("pre", "answer-given", json(r.answer)));
    }
    if (item.result) {
      node.append(el("div", "section", `result: ${item.result.status}`), el("pre", "result", json(item.result.output)));
    }
    if (item.error) node.append(el("div", "error", item.error));
    return node;
  }

  // A sub-agent call: the child's task, its live status and progress (the panel's
  // `children`), its answer once it ended, and its own chat, opened inside the card.
  function renderSubagent(item, chat) {
    const info = item.subagent || {};
    const ended = ["completed", "failed", "cancelled"].includes(info.status);
    const status = ended ? info.status : item.status; // the child's end, once the call has it
    const node = el("details", "item subagent-card");
    const summary = el("summary");
    summary.append(
      el("span", "kind", "sub-agent"), " ",
      el("strong", null, info.name || info.agent_id || item.tool_name || "sub-agent"), " ",
      el("span", `badge child-status ${status}`, status),
    );
    node.append(summary);
    applyHint(node, item, ["running", "waiting"].includes(status));
    node.append(el("div", "section", "task"), el("div", "text task", info.task || ""));
    node.append(el("div", "child-live small muted"));
    if (info.output) node.append(el("div", "section", "answer"), el("div", "text answer", info.output));
    if (info.error || item.error) node.append(el("div", "error", info.error || item.error));
    const toggle = el("button", "child-open link small", "Open its chat");
    toggle.type = "button";
    toggle.addEventListener("click", () => toggleChild(chat, item.id));
    node.append(el("div", "child-tools", null));
    node.lastChild.append(toggle);
    if (info.child && info.child.session_id) toggle.title = `the sub-agent's own session: ${info.child.session_id}`;
    node.append(el("div", "child-chat"));
    return node;
  }

  function paintChild(chat, entry) {
    const child = chat.children[entry.data.id];
    const live = entry.node.querySelector(":scope > .child-live");
    if (!child || !live) return;
    const badge = entry.node.querySelector(":scope > summary .child-status");
    badge.textContent = child.status;
    badge.className = `badge child-status ${child.status}`;
    const used = child.usage || {};
    const parts = [];
    if (used.steps) parts.push(`${used.steps} step(s)`);
    if (used.tool_calls) parts.push(`${used.tool_calls} tool call(s)`);
    const tokens = (used.input_tokens || 0) + (used.output_tokens || 0);
    if (tokens) parts.push(`${tokens} tokens`);
    live.textContent = parts.length ? `progress: ${parts.join(" · ")}` : "";
  }

  async function toggleChild(chat, callId) {
    const entry = chat.items.get(callId);
    if (!entry) return;
    const toggle = entry.node.querySelector("button.child-open");
    if (entry.nested) { // close it: its stream ends with it
      entry.nested.chat.close();
      entry.nested.box.replaceWith(el("div", "child-chat"));
      entry.nested = null;
      toggle.textContent = "Open its chat";
      return;
    }
    const box = el("div", "child-chat open");
    const head = el("div", "nested-head small");
    const status = el("span", "badge", "…");
    const note = el("span", "muted", "");
    head.append(el("span", null, "its chat "), status, " ", note);
    const list = el("div", "nested-items");
    box.append(head, list);
    const path = `${chat.path}/children/${encodeURIComponent(callId)}`;
    const nested = new Chat(list, path, { status, note });
    entry.nested = { chat: nested, box };
    entry.node.querySelector(".child-chat").replaceWith(box);
    entry.node.open = true;
    toggle.textContent = "Close its chat";
    try {
      const snap = await nested.open();
      if (snap) {
        status.textContent = snap.status;
        status.className = `badge ${snap.status}`;
      }
    } catch (e) {
      note.textContent = `${e.type}: ${e.message}`;
    }
  }

  function renderPlan(item) {
    const node = el("details", "item plan-card");
    const steps = item.plan || [];
    const summary = el("summary");
    summary.append(el("span", "kind", "plan"), " ", el("strong", null, `${steps.length} step${steps.length === 1 ? "" : "s"}`));
    node.append(summary);
    applyHint(node, item, true);
    const list = el("ol", "plan-steps");
    for (const step of steps) {
      const li = el("li", `plan-step ${step.status}`);
      li.append(el("span", `badge ${step.status}`, String(step.status).replace("_", " ")), " ", el("span", "step-text", step.content));
      list.append(li);
    }
    node.append(list);
    return node;
  }

  function renderSummary(item) {
    const node = el("details", "item summary-card");
    node.append(el("summary", null, "earlier messages summarised"), el("div", "text", item.text));
    return node;
  }

  function renderGeneric(item) {
    const node = el("div", "item");
    node.append(label(`${item.kind} ${item.role || ""}`, item.status), el("pre", null, item.text || json(item)));
    return node;
  }

  // -- the panel: status, buttons, requests, tasks --------------------------------------------

  function renderPanel(state) {
    const before = page.panel;
    page.panel = state;
    if (before && before.status !== state.status) refreshSessionsSoon();
    const status = $("status");
    status.textContent = state.status;
    status.className = `badge ${state.status}`;
    const row = document.querySelector(`.session-row[data-id="${CSS.escape(page.sessionId || "")}"] .badge`);
    if (row) {
      row.textContent = state.status;
      row.className = `badge ${state.status}`;
    }
    $("steer").disabled = !state.running;
    $("interrupt").disabled = !state.running;
    // A turn that waits for answers (its own or a sub-agent's) goes on when they come.
    const waiting = Object.keys(state.pending || {}).length > 0;
    $("resume").disabled = !state.resumable || waiting;
    $("resume").title = waiting ? "answer the waiting requests first: that continues the task" : "";
    const parked = $("parked");
    parked.textContent = state.parked || "";
    parked.hidden = !state.parked;
    renderRequests(state.pending || {});
    renderTasks(state.tasks || []);
    renderChildren(state.children || {});
  }

  function renderChildren(children) {
    // The sub-agents at work now (the open calls' children), beside the tasks.
    const box = $("children");
    const open = Object.values(children);
    box.hidden = open.length === 0;
    box.replaceChildren(el("h3", null, "Sub-agents at work"));
    const list = el("ul", "children-list");
    for (const child of open) {
      const li = el("li");
      li.append(el("span", `badge ${child.status}`, child.status), " ", el("strong", null, child.name || child.agent_id));
      li.append(el("span", "task-input", child.task));
      li.addEventListener("click", () => {
        const entry = page.chat && page.chat.items.get(child.call_id);
        if (entry) entry.node.scrollIntoView({ block: "nearest" });
      });
      list.append(li);
    }
    box.append(list);
  }

  function renderRequests(pending) {
    // The session's own requests and its sub-agents' (their `path`): each answered here
    // (the service routes a sub-agent's answer to the child that asked).
    const box = $("requests");
    const open = new Set(Object.keys(pending));
    for (const rid of [...page.answered]) if (!open.has(rid)) page.answered.delete(rid);
    for (const card of [...box.children]) if (!open.has(card.dataset.id)) card.remove();
    for (const [rid, request] of Object.entries(pending)) {
      if (page.answered.has(rid)) continue; // answered; its session has not applied it yet
      if (box.querySelector(`[data-id="${CSS.escape(rid)}"]`)) continue;
      box.append(requestCard(rid, request));
    }
  }

  const ASKS = { confirmation: "Approve", ask_user: "Answer the question of", external: "Give the result of" };

  function requestCard(rid, request) {
    const card = el("div", "request-card");
    card.dataset.id = rid;
    const what = request.tool_name ? `${request.tool_name}` : request.kind;
    card.append(el("strong", null, `${ASKS[request.kind] || "Answer"}: ${what}`));
    if (request.path && request.path.length) {
      card.classList.add("from-subagent");
      card.append(" ", el("span", "request-path small muted", `from sub-agent ${request.path.join(" › ")}`));
    }
    if (request.prompt) card.append(el("div", "text prompt", request.prompt));
    const controls = el("div", "controls");
    if (request.kind === "confirmation") {
      const args = el("textarea", "edit-args");
      args.rows = 3;
      args.value = json(request.arguments || {});
      args.hidden = true;
      const reason = el("input", "reason");
      reason.placeholder = "Reason (sent with Reject)";
      const approve = el("button", "approve good", "Approve");
      const edit = el("button", "edit", "Edit arguments");
      const reject = el("button", "reject danger", "Reject");
      approve.addEventListener("click", () => {
        let answer = true;
        if (!args.hidden) {
          let edited;
          try { edited = JSON.parse(args.value); } catch (e) {
            showError({ type: "InvalidAnswer", message: `the edited arguments are not JSON: ${e.message}` });
            return;
          }
          answer = { kind: "approve", edited_args: edited };
        }
        respond(rid, answer, "Approved");
      });
      edit.addEventListener("click", () => { args.hidden = !args.hidden; });
      reject.addEventListener("click", () => {
        const why = reason.value.trim();
        respond(rid, why ? { kind: "reject", reason: why } : false, "Rejected");
      });
      controls.append(approve, edit, reject, reason);
      card.append(el("pre", "arguments", json(request.arguments || {})), args, controls);
    } else {
      const input = el("textarea", "answer-input");
      input.rows = 2;
      input.placeholder = "Your answer";
      const send = el("button", "answer primary", "Answer");
      send.addEventListener("click", () => respond(rid, input.value, "Answered"));
      controls.append(send);
      if (request.kind === "ask_user") { // a tool's question (an MCP elicitation too) may be declined
        const decline = el("button", "decline danger", "Decline");
        decline.addEventListener("click", () => {
          respond(rid, { kind: "reject", reason: input.value.trim() || "declined" }, "Declined");
        });
        controls.append(decline);
      }
      card.append(input, controls);
    }
    return card;
  }

  function renderTasks(tasks) {
    const list = $("tasks");
    list.replaceChildren();
    for (const task of tasks) {
      const li = el("li");
      li.append(el("span", `badge ${task.status}`, task.status), " ");
      li.append(el("span", "task-input", task.input));
      if (["queued", "suspended", "interrupted", "failed"].includes(task.status)) {
        const cancel = el("button", "link small", "cancel");
        cancel.addEventListener("click", () => act(
          () => api("POST", sessionPath(`/turns/${encodeURIComponent(task.turn_id)}/cancel`)),
          () => `Task ${quote(task.input)} cancelled.`,
        ));
        li.append(" ", cancel);
      }
      list.append(li);
    }
  }

  // -- actions (each one API call; what it answers shows on the page) ----------------------------

  async function act(call, describe) {
    showError(null);
    try {
      const result = await call();
      say(describe(result));
      return result;
    } catch (e) {
      showError(e);
      return null;
    }
  }

  function text() { return $("input").value; }

  async function submit() {
    const input = text();
    const r = await act(
      () => api("POST", sessionPath("/turns"), { input }, { "Idempotency-Key": `page-${crypto.randomUUID()}` }),
      (r) => `Task ${quote(input)} accepted: ${r.status}.`,
    );
    if (r) { $("input").value = ""; loadSessions(); }
  }

  async function steer() {
    const r = await act(() => api("POST", sessionPath("/steer"), { input: text() }), (r) => `Guidance for ${taskName(r.turn_id)} accepted.`);
    if (r) $("input").value = "";
  }

  async function inject() {
    const r = await act(() => api("POST", sessionPath("/inject"), { material: text() }), () => "Material accepted; the next step reads it.");
    if (r) $("input").value = "";
  }

  async function interrupt() {
    const running = page.panel && page.panel.running;
    await act(
      () => api("POST", sessionPath("/interrupt"), { run_id: running ? running.run_id : null }),
      (r) => (r.interrupted ? "Interrupt requested." : "Nothing is running."),
    );
  }

  async function resume() {
    const turn = page.panel && page.panel.resumable;
    if (!turn) return;
    await act(() => api("POST", sessionPath(`/turns/${encodeURIComponent(turn)}/resume`)), (r) => `Task ${taskName(r.turn_id)} resumes.`);
  }

  async function respond(rid, answer, what) {
    const r = await act(
      () => api("POST", sessionPath("/answers"), { answers: { [rid]: answer } }),
      (r) => `${what}; task ${taskName(r.turn_id)} goes on.`,
    );
    if (r) {
      page.answered.add(rid);
      const card = $("requests").querySelector(`[data-id="${CSS.escape(rid)}"]`);
      if (card) card.remove();
    }
  }

  // -- wiring -------------------------------------------------------------------------------

  function wire() {
    $("sign-in").addEventListener("submit", signIn);
    $("sign-out").addEventListener("click", signOut);
    $("new-session").addEventListener("click", newSession);
    $("search").addEventListener("input", () => {
      clearTimeout(page.searchTimer);
      page.searchTimer = setTimeout(loadSessions, 250);
    });
    $("submit").addEventListener("click", submit);
    $("steer").addEventListener("click", steer);
    $("inject").addEventListener("click", inject);
    $("interrupt").addEventListener("click", interrupt);
    $("resume").addEventListener("click", resume);
    $("input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) submit();
    });
  }

  async function boot() {
    wire();
    try {
      const me = await api("GET", "/v1/auth/me");
      await start(me);
    } catch (e) {
      if (e.status !== 401) {
        banner(`The service cannot be reached (${e.message}); reload the page to try again.`);
      }
    }
  }

  boot();
})();
