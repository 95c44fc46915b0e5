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
    agentChange: null, // what differs from the agent the open session is bound to, if it does
    noticeTimer: null,
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
      const problem = new Problem(response.status, data);
      if (response.status === 401 && path !== "/v1/auth/sign-in" && path !== "/v1/auth/me") {
        showSignIn(words(problem));
      }
      throw problem;
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

  // Words for a person, by problem type: the problem's own detail is for developers (it
  // names Python calls and HTTP headers) and shows on hover only.
  const WORDS = {
    Unauthorized: "You are signed out: the token you signed in with was revoked or has expired. Sign in with a new one (agentnb token add USER); your unsent message is kept.",
    SessionNotFound: "This session does not exist, or it is not yours: pick one from the list, or start a new one.",
    SessionDeleted: "This session was deleted: pick another, or start a new one.",
    SessionArchived: "This session is archived: it can be read, but it takes no new work.",
    AgentChanged: "This session was started with another version of the agent: it can be read here, and it goes on only once the service is started with agentnb serve --accept-agent-change.",
    QueueFull: "Too many tasks or messages are waiting already: try again once some are done.",
    NotRunning: "Nothing is running, so there is nothing to steer: send it as a new task (Submit).",
    SessionBusy: "A task is running: interrupt it first.",
    SessionFull: "This session is full: start a new session.",
    UncertainToolCalls: "Resuming could repeat an action whose outcome is unknown: it needs a person to record what happened first (agentnb show lists it).",
    Unreachable: "The service cannot be reached: is it running?",
    Forbidden: "This page is out of date: reload it.",
    PayloadTooLarge: "That message is too long for the service.",
    Timeout: "The service took too long to answer: the action may or may not have happened; look at the chat before trying again.",
    InternalError: "The service failed unexpectedly; its log says why.",
  };

  function words(e) {
    return WORDS[e.type] || e.message;
  }

  function showError(e) {
    const node = $("error");
    node.textContent = e ? words(e) : "";
    node.title = e ? `${e.type || "Error"}: ${e.message}` : "";
  }

  // A notice says what just happened, then goes: it never outlives what it describes.
  const NOTICE_MS = 6000;
  function say(text) {
    const notice = $("notice");
    clearTimeout(page.noticeTimer);
    notice.textContent = text || "";
    notice.hidden = !text;
    if (text) page.noticeTimer = setTimeout(() => say(""), NOTICE_MS);
  }

  // One vocabulary for every status the page shows; the raw status stays the CSS class
  // (and the hover text), so nothing else has to know these words.
  const STATUS_WORDS = {
    queued: "queued",
    running: "running",
    suspended: "waiting for you",
    parked: "waiting for you",
    pending: "waiting for you",
    waiting: "waiting for you",
    requested: "asked",
    allowed: "approved",
    answered: "answered",
    interrupted: "interrupted",
    failed: "failed",
    error: "failed",
    completed: "done",
    success: "done",
    idle: "idle",
    cancelled: "cancelled",
    denied: "rejected",
    unknown: "outcome unknown",
    generating: "being written",
    streaming: "writing",
    finishing: "writing",
    in_progress: "in progress",
  };
  // A reply being drafted, and a step of the model's plan, have words of their own.
  const REPLY_WORDS = { waiting: "thinking", streaming: "writing", finishing: "writing" };
  const PLAN_WORDS = { pending: "to do", in_progress: "in progress", completed: "done" };
  const statusWord = (status, vocab) =>
    (vocab && vocab[status]) || STATUS_WORDS[status] || String(status || "").replace("_", " ");
  function badge(status, cls, vocab) {
    return el("span", `badge ${cls ? `${cls} ` : ""}${status}`, statusWord(status, vocab));
  }
  function setBadge(node, status, cls) {
    node.textContent = statusWord(status);
    node.className = `badge ${cls ? `${cls} ` : ""}${status}`;
  }

  function banner(text, ok) {
    const node = $("banner");
    node.textContent = text || "";
    node.hidden = !text;
    node.classList.toggle("ok", !!ok);
  }

  // -- signing in ---------------------------------------------------------------------------

  function showSignIn(reason) {
    closeStream();
    keepDraft();
    banner("");
    $("app").hidden = true;
    $("sign-in").hidden = false;
    $("sign-in-error").textContent = reason || "";
    $("token").focus();
  }

  // What the person is typing survives a sign-out, a refused stream and a reload.
  const DRAFT = "agentnb-draft";
  function keepDraft() {
    try { sessionStorage.setItem(DRAFT, $("input").value); } catch (e) { /* storage off */ }
  }
  function restoreDraft() {
    let draft = null;
    try { draft = sessionStorage.getItem(DRAFT); } catch (e) { draft = null; }
    if (draft && !$("input").value) $("input").value = draft;
  }
  function clearDraft() {
    $("input").value = "";
    keepDraft();
  }

  async function signIn(event) {
    event.preventDefault();
    $("sign-in-error").textContent = "";
    try {
      const me = await api("POST", "/v1/auth/sign-in", { token: $("token").value.trim() });
      $("token").value = "";
      await start(me);
    } catch (e) {
      $("sign-in-error").textContent = e.type === "Unauthorized"
        ? "That token is not valid: mistyped, revoked or expired. Paste the whole token, or ask for a new one (agentnb token add USER)."
        : words(e);
      $("sign-in-error").title = `${e.type}: ${e.message}`;
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
    $("sign-in-error").textContent = "";
    $("app").hidden = false;
    restoreDraft();
    $("user").textContent = me.auth === "none" ? "" : `signed in as ${me.user_id}`;
    $("sign-out").hidden = me.auth !== "sign-in";
    try {
      page.agent = await api("GET", "/v1/agent");
      $("agent-name").textContent = page.agent.name;
    } catch (e) { showError(e); }
    await loadSessions();
    const wanted = new URLSearchParams(location.hash.slice(1)).get("s");
    if (wanted) await openSession(wanted);
    else showNoSession();
  }

  // With no session open, Submit starts one (the composer says so); the rest wait for one.
  function showNoSession() {
    $("title").textContent = "No session open";
    $("title").title = "";
    for (const id of ["steer", "inject", "interrupt", "resume"]) $(id).disabled = true;
    $("composer-note").textContent = "No session is open: Submit starts a new one with your message, or pick one on the left.";
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
      // <bdi>: a title's bidirectional controls (U+202E, ...) stay inside it.
      row.append(el("bdi", "row-title", info.title || "untitled session"));
      row.title = id;
      const meta = el("span", "small muted");
      meta.append(badge(info.status), " ", plural(info.counts.turns, "task"));
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
    node.replaceChildren(el("bdi", "", title || "untitled session"));
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
        else if (page.chat === this) recover(); // a revoked sign-in lands on the form, saying so
      });
    }

    headNote(text) {
      if (this.nested) this.nested.note.textContent = text;
    }

    onState(state) {
      this.children = state.children || {};
      for (const entry of this.items.values()) if (entry.data.kind === "subagent") paintChild(this, entry);
      if (this.nested) {
        setBadge(this.nested.status, state.status);
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
      if (!span) return;
      let live = this.liveText(entry.data.model_call_id || entry.data.id);
      // The committed part is rendered Markdown, which drops its trailing space: put it back
      // where the live text goes on ("$10 costs. Here is", not "$10 costs.Here is").
      if (live && entry.data.text && /\s$/.test(entry.data.text) && !/^\s/.test(live)) live = ` ${live}`;
      span.textContent = live;
    }

    // An answer cut off by an interrupt or a restart, once a later run of its task answers:
    // folded away (the new answer says it all), one click opens it.
    markSuperseded() {
      const answered = new Map(); // turn id -> seq of its newest completed reply
      for (const { data } of this.items.values()) {
        if (data.kind === "message" && data.role === "assistant" && data.status === "completed" && data.text) {
          answered.set(data.turn_id, Math.max(answered.get(data.turn_id) || 0, data.seq));
        }
      }
      for (const entry of this.items.values()) {
        const { data, node } = entry;
        if (data.kind !== "message" || data.role !== "assistant") continue;
        const later = answered.get(data.turn_id);
        const cut = ["interrupted", "failed", "cancelled"].includes(data.status);
        node.classList.toggle("superseded", cut && later !== undefined && later > data.seq);
      }
    }

    // Material handed over and not yet read by a step: shown at the end of the chat until
    // the step that reads it commits it (then it is a message of its own).
    showMaterials(materials) {
      for (const node of [...this.list.querySelectorAll(":scope > .item-material.waiting")]) node.remove();
      for (const m of materials) {
        const node = el("div", "item item-user item-material waiting");
        node.dataset.material = m.id;
        node.title = m.id;
        node.append(label("you (material)"), el("div", "text", m.text));
        node.querySelector(".label").append(" ", el("span", "badge queued", "read at the next step"));
        this.list.append(node);
      }
      if (materials.length) this.scrollDown(false);
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
      if (item.kind === "message" && item.role === "assistant") {
        this.paintLive(entry);
        this.markSuperseded();
      }
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
    $("app").dataset.pane = "";
    $("composer-note").textContent = "";
    $("inject").disabled = false;
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
    } catch (e) {
      if (page.chat !== chat) return;
      closeStream();
      page.sessionId = null;
      history.replaceState(null, "", location.pathname);
      showNoSession();
      showError(e);
      return;
    }
    if (!snap || page.chat !== chat) return;
    page.agentChange = snap.agent_change || null;
    showTitle(snap.info.title);
    showCursor();
    renderPanel({
      materials: [],
      status: snap.status, running: null, resumable: null, parked: null,
      pending: snap.pending, tasks: snap.tasks, queued: snap.tasks.filter((t) => t.status === "queued").length,
    });
    chat.scrollDown(true);
  }

  async function recover() {
    try {
      await api("GET", "/v1/auth/me");
    } catch (e) {
      // The sign-in ended under the open page (its token was revoked, or it expired): say
      // so on the sign-in form; the message being typed stays in the composer.
      if (e.status === 401) showSignIn(words(e));
      return;
    }
    if (page.sessionId) await openSession(page.sessionId);
  }

  function closeStream() {
    if (page.chat) page.chat.close();
    page.chat = null;
  }

  function showCursor() {
    const cursor = page.chat && page.chat.cursor;
    $("status").title = cursor
      ? `shown up to event ${cursor.split(":").pop()} of the session's log; a reload goes on from there`
      : "";
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
    if (status && status !== "completed") node.append(" ", badge(status, null, REPLY_WORDS));
    return node;
  }

  const SOURCES = { steer: "guidance", inject: "material", answer: "answer" };

  function renderMessage(item) {
    const node = el("div", `item item-${item.role}`);
    if (item.role === "assistant" && !item.text && item.status === "completed" && item.tool_call_ids.length) {
      node.classList.add("quiet"); // a reply that only calls tools: its cards say it all
      return node;
    }
    if (item.role === "assistant") {
      if (["waiting", "streaming", "finishing"].includes(item.status)) node.classList.add("drafting");
      node.append(label("assistant", item.status));
      const note = el("button", "superseded-note link small", "An earlier answer, cut off when the task stopped; the answer below replaces it. Show it");
      note.type = "button";
      note.addEventListener("click", () => {
        const open = node.classList.toggle("expanded");
        note.textContent = open ? "Hide the earlier answer" : "An earlier answer, cut off when the task stopped; the answer below replaces it. Show it";
      });
      node.append(note);
      if (item.reasoning) {
        // Reasoning is a closed fold of plain text (never Markdown, never HTML).
        const thinking = el("details", "thinking");
        thinking.append(el("summary", "", `Thinking (${item.reasoning.length} characters)`));
        thinking.append(el("div", "text", item.reasoning));
        node.append(thinking);
      }
      const md = el("div", "md");
      md.innerHTML = item.html || ""; // rendered by the server: raw HTML disabled, text escaped
      node.append(md, el("span", "live"));
      if (item.error) node.append(el("div", "error", item.error));
      const answer = item.status === "completed" && item.turn_id && item.text && !item.tool_call_ids.length;
      if (answer) node.append(ratingBar(item)); // a reply that also calls tools is a step
    } else {
      const source = item.source && item.source !== "submit" ? ` (${SOURCES[item.source] || item.source})` : "";
      const who = item.role === "user" ? "you" : item.role;
      node.append(label(`${who}${source}`), el("div", "text", item.text));
      if (item.source === "inject") node.classList.add("item-material");
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
    summary.append(el("strong", null, item.tool_name || "tool"), " ", badge(item.status));
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
      node.append(el("div", "section", `${REQUEST_WORDS[r.kind] || "request"}: ${statusWord(r.status)}`));
      if (r.prompt) node.append(el("div", "text", r.prompt));
      if (r.answer && Object.keys(r.answer).length) node.append(el("pre", "answer-given", json(r.answer)));
    }
    if (item.result && item.result.blocks && item.result.blocks.length) {
      // A rich result: thumbnails of its images on the card's line, every block inside.
      for (const block of item.result.blocks) if (block.type === "image") summary.append(" ", thumbnail(block, "thumb-small"));
      node.append(el("div", "section", `result: ${item.result.status}`), resultBlocks(item.result.blocks));
    } else if (item.result) {
      node.append(el("div", "section", `result: ${item.result.status}`), el("pre", "result", json(item.result.output)));
    }
    if (item.error) node.append(el("div", "error", item.error));
    return node;
  }

  // Result blocks (agentnb.blocks): small bytes come inline (base64), larger ones from the
  // session's blocks route, which serves only the blocks of this session's results.
  const blockUrl = (block) => block.data
    ? `data:${block.mime};base64,${block.data}`
    : sessionPath(`/blocks/${encodeURIComponent(block.sha256)}`);

  function thumbnail(block, cls) {
    const img = el("img", cls || "thumb");
    img.src = blockUrl(block);
    img.alt = block.name || "image";
    img.title = `${block.name || "image"} (${block.mime}, ${block.size} bytes)`;
    img.loading = "lazy";
    return img;
  }

  function resultBlocks(blocks) {
    const box = el("div", "result-blocks");
    for (const block of blocks) {
      if (block.type === "text") box.append(el("div", "text result", block.text));
      else if (block.type === "json") box.append(el("pre", "result", json(block.data)));
      else if (block.type === "image") {
        const link = el("a", "thumb-link");
        link.href = blockUrl(block);
        link.target = "_blank";
        link.rel = "noopener";
        link.append(thumbnail(block));
        box.append(link);
      } else {
        const link = el("a", "file-link", `${block.name || "file"} (${block.mime}, ${block.size} bytes)`);
        link.href = blockUrl(block);
        link.download = block.name || "file";
        box.append(link);
      }
    }
    return box;
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
      badge(status, "child-status"),
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
    setBadge(entry.node.querySelector(":scope > summary .child-status"), child.status, "child-status");
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
      if (snap) setBadge(status, snap.status);
    } catch (e) {
      note.textContent = words(e);
      note.title = `${e.type}: ${e.message}`;
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
      li.append(badge(step.status, null, PLAN_WORDS), " ", el("span", "step-text", step.content));
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
    setBadge($("status"), state.status);
    const row = document.querySelector(`.session-row[data-id="${CSS.escape(page.sessionId || "")}"] .badge`);
    if (row) setBadge(row, state.status);
    // Said before the person types: new work would be refused (AgentChanged).
    $("composer-note").textContent = page.agentChange
      ? `${WORDS.AgentChanged} (What changed: ${page.agentChange.join("; ")}.)`
      : "";
    if (page.chat) page.chat.showMaterials(state.materials || []);
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
      li.append(badge(child.status), " ", el("strong", null, child.name || child.agent_id));
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

  const REQUEST_WORDS = { confirmation: "approval", ask_user: "question", external: "result from outside" };
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
      li.title = task.turn_id;
      li.append(badge(task.status), " ");
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
    if (!input.trim()) {
      showError({ type: "Empty", message: "Type a message first." });
      return;
    }
    if (!page.sessionId) { // no session open: this message starts one
      const made = await act(() => api("POST", "/v1/sessions", {}), () => "");
      if (!made) return;
      await loadSessions();
      await openSession(made.key.session_id);
      if (!page.sessionId) return;
    }
    // Every task is accepted as queued; it waits only if another is running or held up.
    const busy = !!page.panel && page.panel.status !== "idle";
    const r = await act(
      () => api("POST", sessionPath("/turns"), { input }, { "Idempotency-Key": `page-${crypto.randomUUID()}` }),
      (r) => (r.status === "queued" && busy ? `Task ${quote(input)} waits its turn in the queue.` : `Task ${quote(input)} sent.`),
    );
    if (r) { clearDraft(); loadSessions(); }
  }

  async function steer() {
    const r = await act(() => api("POST", sessionPath("/steer"), { input: text() }), (r) => `Guidance for ${taskName(r.turn_id)} sent: the task reads it at its next step.`);
    if (r) clearDraft();
  }

  async function inject() {
    const r = await act(() => api("POST", sessionPath("/inject"), { material: text() }), () => "Material handed over: it shows in the chat, and the agent reads it at its next step.");
    if (r) clearDraft();
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
    $("input").addEventListener("input", keepDraft);
    $("show-sessions").addEventListener("click", () => togglePane("sessions"));
    $("show-tasks").addEventListener("click", () => togglePane("tasks"));
  }

  // On a narrow screen the session list and the task panel are panes over the chat, one at
  // a time, opened from the chat's header.
  function togglePane(which) {
    const app = $("app");
    const open = app.dataset.pane === which;
    app.dataset.pane = open ? "" : which;
    $("show-sessions").setAttribute("aria-expanded", String(!open && which === "sessions"));
    $("show-tasks").setAttribute("aria-expanded", String(!open && which === "tasks"));
  }

  async function boot() {
    wire();
    try {
      const me = await api("GET", "/v1/auth/me");
      await start(me);
    } catch (e) {
      if (e.status === 401) showSignIn();
      else banner(`The service cannot be reached (${e.message}); reload the page to try again.`);
    }
  }

  boot();
})();
