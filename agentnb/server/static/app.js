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
    cursor: null,
    source: null,
    items: new Map(), // id -> {data, node}
    live: new Map(), // model_call_id -> {committed: n, pieces: Map(piece -> text)}
    panel: null,
    reconnecting: false,
    searchTimer: null,
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
      row.append(el("span", "row-title", info.title || id));
      const meta = el("span", "small muted");
      meta.append(el("span", `badge ${info.status}`, info.status), " ", `${info.counts.turns} turns`);
      row.append(meta);
      row.addEventListener("click", () => openSession(id));
      list.append(row);
    }
  }

  async function newSession() {
    try {
      const info = await api("POST", "/v1/sessions", {});
      await loadSessions();
      await openSession(info.key.session_id);
    } catch (e) { showError(e); }
  }

  // -- one session: snapshot, then the stream after its cursor ----------------------------------

  async function openSession(id) {
    closeStream();
    page.sessionId = id;
    location.hash = `s=${encodeURIComponent(id)}`;
    for (const row of document.querySelectorAll(".session-row")) {
      row.classList.toggle("current", row.dataset.id === id);
    }
    showError(null);
    say("");
    let snap;
    try {
      snap = await api("GET", `${sessionPath()}?html=true&messages=false`);
    } catch (e) { showError(e); return; }
    if (page.sessionId !== id) return;
    $("title").textContent = snap.info.title || id;
    page.items.clear();
    page.live.clear();
    $("items").replaceChildren();
    for (const item of snap.items) putItem(item, null, true);
    page.cursor = snap.cursor;
    showCursor();
    renderPanel({
      status: snap.status, running: null, resumable: null, parked: null,
      pending: snap.pending, tasks: snap.tasks, queued: snap.tasks.filter((t) => t.status === "queued").length,
    });
    scrollDown(true);
    openStream(snap.cursor);
  }

  function openStream(cursor) {
    const path = `${sessionPath("/stream")}?mode=page&after=${encodeURIComponent(cursor)}`;
    const source = new EventSource(path);
    page.source = source;
    source.addEventListener("open", () => {
      if (page.reconnecting) banner("Reconnected: the chat goes on from where it was.", true);
      page.reconnecting = false;
      setTimeout(() => { if (!page.reconnecting) banner(""); }, 2500);
    });
    source.addEventListener("error", () => {
      if (page.source !== source) return;
      if (source.readyState === EventSource.CLOSED) {
        // Refused (a 4xx): the session is gone, or the sign-in ended.
        banner("The stream was refused; reloading the session…");
        page.source = null;
        setTimeout(() => { if (page.sessionId) recover(); }, 2000);
        return;
      }
      page.reconnecting = true;
      banner("Connection lost: reconnecting to the server…");
    });
    source.addEventListener("committed", (e) => onCommitted(JSON.parse(e.data)));
    source.addEventListener("chunk", (e) => onChunk(JSON.parse(e.data)));
    source.addEventListener("state", (e) => renderPanel(JSON.parse(e.data)));
    source.addEventListener("end", (e) => {
      const data = JSON.parse(e.data);
      closeStream();
      banner(`The stream ended: ${data.reason}`);
    });
  }

  async function recover() {
    try {
      await api("GET", "/v1/auth/me");
    } catch (e) { return; } // 401 shows the sign-in
    if (page.sessionId) await openSession(page.sessionId);
  }

  function closeStream() {
    if (page.source) page.source.close();
    page.source = null;
  }

  function showCursor() {
    $("cursor").textContent = page.cursor ? `@ ${page.cursor.split(":").pop()}` : "";
  }

  function onCommitted(frame) {
    page.cursor = `${page.sessionId}:${frame.seq}`;
    showCursor();
    if (frame.type === "model/dispatch") {
      page.live.delete(frame.data && frame.data.model_call_id);
    } else if (frame.type === "model/chunk" && frame.data) {
      const live = liveOf(frame.data.model_call_id);
      live.committed = Math.max(live.committed, frame.data.index + frame.data.pieces);
      for (const piece of [...live.pieces.keys()]) if (piece < live.committed) live.pieces.delete(piece);
    } else if (frame.type === "message/assistant" && frame.data && frame.data.model_call_id) {
      page.live.delete(frame.data.model_call_id);
    }
    if (frame.items) {
      if (frame.reset) {
        page.items.clear();
        $("items").replaceChildren();
      }
      for (const id of frame.removed || []) removeItem(id);
      for (const item of frame.items) putItem(item, item.after, false);
      scrollDown(false);
    }
  }

  function liveOf(modelCallId) {
    let live = page.live.get(modelCallId);
    if (!live) {
      live = { committed: 0, pieces: new Map() };
      page.live.set(modelCallId, live);
    }
    return live;
  }

  function onChunk(chunk) {
    if (chunk.kind !== "model/chunk" || typeof chunk.text !== "string") return;
    const live = liveOf(chunk.model_call_id);
    if (chunk.piece < live.committed) return; // already in a committed frame
    live.pieces.set(chunk.piece, chunk.text);
    const entry = page.items.get(chunk.model_call_id);
    if (entry) paintLive(entry);
    scrollDown(false);
  }

  function liveText(modelCallId) {
    const live = page.live.get(modelCallId);
    if (!live) return "";
    return [...live.pieces.keys()].sort((a, b) => a - b).map((k) => live.pieces.get(k)).join("");
  }

  // -- items ---------------------------------------------------------------------------------

  const renderers = {
    message: renderMessage,
    tool: renderTool,
    summary: renderSummary,
    // A sub-agent's card registers its renderer here, by item kind.
  };

  function putItem(item, after, append) {
    const render = renderers[item.kind] || renderGeneric;
    const node = render(item);
    node.dataset.id = item.id;
    const known = page.items.get(item.id);
    const entry = { data: item, node };
    page.items.set(item.id, entry);
    const list = $("items");
    if (known) {
      known.node.replaceWith(node);
    } else if (append) {
      list.append(node);
    } else if (after === null || after === undefined) {
      list.prepend(node);
    } else {
      const before = page.items.get(after);
      if (before && before.node.parentNode === list) before.node.after(node);
      else list.append(node);
    }
    if (item.kind === "message" && item.role === "assistant") paintLive(entry);
  }

  function removeItem(id) {
    const entry = page.items.get(id);
    if (!entry) return;
    entry.node.remove();
    page.items.delete(id);
  }

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
    } else {
      const source = item.source && item.source !== "submit" ? ` (${item.source})` : "";
      node.append(label(`${item.role}${source}`), el("div", "text", item.text));
    }
    return node;
  }

  function paintLive(entry) {
    const span = entry.node.querySelector(".live");
    if (span) span.textContent = liveText(entry.data.model_call_id || entry.data.id);
  }

  function renderTool(item) {
    const node = el("details", "item tool-card");
    const summary = el("summary");
    summary.append(el("strong", null, item.tool_name || "tool"), " ", el("span", `badge ${item.status}`, item.status));
    node.append(summary);
    if (item.status === "waiting" || item.status === "generating" || item.status === "running") node.open = true;
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

  function scrollDown(force) {
    const list = $("items");
    const near = list.scrollHeight - list.scrollTop - list.clientHeight < 120;
    if (force || near) list.scrollTop = list.scrollHeight;
  }

  // -- the panel: status, buttons, requests, tasks --------------------------------------------

  function renderPanel(state) {
    page.panel = state;
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
    $("resume").disabled = !state.resumable;
    const parked = $("parked");
    parked.textContent = state.parked || "";
    parked.hidden = !state.parked;
    renderRequests(state.pending || {});
    renderTasks(state.tasks || []);
  }

  function renderRequests(pending) {
    const box = $("requests");
    const open = new Set(Object.keys(pending));
    for (const card of [...box.children]) if (!open.has(card.dataset.id)) card.remove();
    for (const [rid, request] of Object.entries(pending)) {
      if (box.querySelector(`[data-id="${CSS.escape(rid)}"]`)) continue;
      box.append(requestCard(rid, request));
    }
  }

  function requestCard(rid, request) {
    const card = el("div", "request-card");
    card.dataset.id = rid;
    const what = request.tool_name ? `${request.tool_name}` : request.kind;
    card.append(el("strong", null, `${request.kind === "confirmation" ? "Approve" : "Answer"}: ${what}`));
    if (request.prompt) card.append(el("div", "text", request.prompt));
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
          () => `Task ${task.turn_id} cancelled.`,
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
    const r = await act(
      () => api("POST", sessionPath("/turns"), { input: text() }, { "Idempotency-Key": `page-${crypto.randomUUID()}` }),
      (r) => `Task ${r.turn_id} accepted (${r.status}).`,
    );
    if (r) { $("input").value = ""; loadSessions(); }
  }

  async function steer() {
    const r = await act(() => api("POST", sessionPath("/steer"), { input: text() }), (r) => `Guidance for ${r.turn_id} accepted.`);
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
    await act(() => api("POST", sessionPath(`/turns/${encodeURIComponent(turn)}/resume`)), (r) => `Turn ${r.turn_id} resumes.`);
  }

  async function respond(rid, answer, what) {
    const r = await act(
      () => api("POST", sessionPath("/answers"), { answers: { [rid]: answer } }),
      (r) => `${what}; turn ${r.turn_id} goes on.`,
    );
    if (r) {
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
