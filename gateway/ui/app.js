// hookbus console: the live decision feed, session lanes, event detail, counters, and the policy what-if.
// No build step and no dependency: the page reads GET /v1/events/stream with fetch() (EventSource cannot send
// an Authorization header) and parses the Server-Sent Events itself. Everything from the log is put in the page
// with textContent, never as HTML: hook inputs are written by agents. Invisible and reordering characters in it
// (controls, bidi overrides, zero-width and tag characters) are shown as a marker, ⟨U+202E⟩, by visible().
"use strict";

(() => {
  const MAX_RECORDS = 2000; // records kept in memory (older ones are dropped)
  const MAX_ROWS = 400; // feed rows in the DOM
  const MAX_LANES = 12;
  const MAX_CHIPS = 60; // events per session lane
  const BACKLOG = 200; // records asked for on a fresh connection
  const TOKEN_KEY = "hookbus.token";
  const LANES_EVERY_MS = 250;

  const $ = (id) => document.getElementById(id);
  const state = {
    records: [], // oldest first
    byId: new Map(),
    pending: [],
    frame: 0,
    lastId: null,
    retryMs: 2000,
    abort: null,
    selected: null,
    sessions: new Map(),
    seen: { tenant: new Set(), session: new Set(), tool: new Set(), agent: new Set() },
    seconds: [], // {second, n, blocked} of the last 60 s of records that arrived live (not history)
    failOpens: 0,
    lanesDirty: false,
    lanesAt: 0,
    lanesTimer: 0,
    isLive: false,
  };

  // -- small DOM helpers ---------------------------------------------------------------------------------------

  // C0 and C1 controls, DEL, soft hyphen, the bidi marks, embeddings, overrides and isolates, zero-width space
  // and word joiner, the line and paragraph separators, the BOM, interlinear annotations and the tag characters.
  const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;
  const marker = (ch) => `⟨U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`;
  // Agent-controlled text as the page shows it: every invisible or reordering character made visible.
  const visible = (text) => (text === null || text === undefined ? "" : String(text)).replace(INVISIBLE, marker);
  // The same for text laid out in lines (a <pre> of JSON): its line breaks stay.
  const visibleLines = (text) => String(text).split("\n").map(visible).join("\n");

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = visible(value);
      else if (key === "lines") node.textContent = visibleLines(value);
      else if (key === "title" || key === "value") node[key] = visible(value);
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children) {
      if (typeof child === "string") node.append(visible(child));
      else if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }
  const badge = (verdict) => el("span", { class: `v v-${verdict}`, text: verdict });
  const short = (id) => (id || "").replace(/^plugin:/, "").slice(0, 8);
  const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });
  const stamp = (ms) => new Date(ms).toLocaleString([], { hour12: false });
  const what = (rec) => rec.event + (rec.tool_name ? `(${rec.tool_name})` : "");
  const agentOf = (rec) => rec.agent || "claude"; // records written before they named their agent

  function reasonOf(output) {
    const specific = (output && output.hookSpecificOutput) || {};
    const decision = specific.decision && typeof specific.decision === "object" ? specific.decision.message : null;
    for (const value of [specific.permissionDecisionReason, decision, output && output.reason,
      output && output.stopReason, output && output.systemMessage]) {
      if (typeof value === "string" && value.trim()) return value.trim().split("\n")[0];
    }
    return "";
  }

  function inputSummary(input) {
    const tool = input && input.tool_input;
    if (tool && typeof tool === "object") {
      for (const key of ["command", "file_path", "path", "url", "pattern", "query"]) {
        if (typeof tool[key] === "string") return tool[key];
      }
      return JSON.stringify(tool);
    }
    return input && typeof input.prompt === "string" ? input.prompt : "";
  }

  // -- the token -----------------------------------------------------------------------------------------------

  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";
  const authHeaders = () => (token() ? { Authorization: `Bearer ${token()}` } : {});

  function askToken(message) {
    const error = $("token-error");
    error.hidden = !message;
    error.textContent = message || "";
    $("token-input").value = "";
    if (!$("token-dialog").open) $("token-dialog").showModal();
    $("token-input").focus();
  }

  function useToken(value) {
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token-dialog").close();
    state.lastId = null;
    reset();
    connect();
  }

  // -- the stream ----------------------------------------------------------------------------------------------

  function setStatus(kind, text) {
    const status = $("status");
    status.className = `status ${kind}`;
    status.textContent = visible(text || kind);
  }

  async function connect() {
    if (state.abort) state.abort.abort();
    const ctrl = new AbortController();
    state.abort = ctrl;
    setStatus("connecting");
    const headers = { ...authHeaders(), Accept: "text/event-stream" };
    let url = `/v1/events/stream?backlog=${BACKLOG}`;
    if (state.lastId) {
      headers["Last-Event-ID"] = state.lastId;
      url = "/v1/events/stream";
    }
    let response;
    try {
      response = await fetch(url, { headers, signal: ctrl.signal, cache: "no-store" });
    } catch (err) {
      if (!ctrl.signal.aborted) retry(ctrl);
      return;
    }
    if (response.status === 401) {
      setStatus("error", "token needed");
      askToken(token() ? "The gateway refused that token." : "");
      return;
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      setStatus("error", body.detail || `HTTP ${response.status}`);
      retry(ctrl, response.status === 429 ? 5000 : null);
      return;
    }
    setStatus("live");
    try {
      await readEvents(response.body);
    } catch (err) {
      // the connection broke: reconnect below, from the last event id
    }
    if (!ctrl.signal.aborted) retry(ctrl);
  }

  function retry(ctrl, delayMs) {
    setStatus("connecting", "reconnecting");
    setTimeout(() => {
      if (state.abort === ctrl && !ctrl.signal.aborted) connect();
    }, delayMs || state.retryMs);
  }

  async function readEvents(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    const newline = /\r\n|\r|\n/g;
    let buffer = "";
    let message = { event: "message", data: [], id: null };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let pos = 0; // lines are cut from a cursor: slicing the whole buffer per line would be quadratic
      for (;;) {
        newline.lastIndex = pos;
        const found = newline.exec(buffer);
        if (!found || (found[0] === "\r" && found.index === buffer.length - 1)) break; // a \n may follow
        const line = buffer.slice(pos, found.index);
        pos = found.index + found[0].length;
        if (line === "") {
          if (message.data.length) dispatch(message.event, message.data.join("\n"), message.id);
          message = { event: "message", data: [], id: null };
          continue;
        }
        if (line.startsWith(":")) continue; // a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "data") message.data.push(text);
        else if (field === "event") message.event = text;
        else if (field === "id") message.id = text;
        else if (field === "retry" && /^\d+$/.test(text)) state.retryMs = Number(text);
      }
      buffer = buffer.slice(pos);
    }
  }

  function dispatch(kind, data, id) {
    let body;
    try {
      body = JSON.parse(data);
    } catch (err) {
      return;
    }
    if (kind === "decision") {
      if (id) state.lastId = id;
      body.__live = state.isLive;
      state.pending.push(body);
      if (!state.frame) state.frame = requestAnimationFrame(flush);
    } else if (kind === "hello") {
      state.isLive = false;
      $("scope").textContent = body.scope ? visible(`tenant ${body.scope}`) : "all tenants";
    } else if (kind === "live") {
      state.isLive = true;
    } else if (kind === "gap") {
      setStatus("error", "gap: some records were trimmed from the log");
    } else if (kind === "error") {
      setStatus("error", body.detail || body.error || "stream error");
    }
  }

  // -- ingesting a batch (once per animation frame) ------------------------------------------------------------

  function reset() {
    state.records = [];
    state.byId.clear();
    state.sessions.clear();
    state.seconds = [];
    state.failOpens = 0;
    state.selected = null;
    $("feed").replaceChildren();
    $("lanes").replaceChildren();
  }

  function flush() {
    state.frame = 0;
    let batch = state.pending;
    state.pending = [];
    if (batch.length > MAX_RECORDS) batch = batch.slice(batch.length - MAX_RECORDS);
    const now = Date.now();
    const f = filters();
    const shown = [];
    for (const rec of batch) {
      if (state.byId.has(rec.log_id)) continue;
      ingest(rec, now);
      if (matches(rec, f)) shown.push(rec);
    }
    trim();
    prependRows(shown);
    if (state.lanesDirty && !state.lanesTimer) { // lanes are redrawn at most every LANES_EVERY_MS
      const waitMs = Math.max(0, LANES_EVERY_MS - (now - state.lanesAt));
      state.lanesTimer = setTimeout(() => {
        state.lanesTimer = 0;
        renderLanes(Date.now());
      }, waitMs);
    }
    renderCounters(now);
  }

  function ingest(rec, now) {
    state.records.push(rec);
    state.byId.set(rec.log_id, rec);
    if (rec.verdict === "fail-open") state.failOpens += 1;
    if (rec.__live) countLive(rec.verdict, now);
    remember("tenant", rec.tenant);
    remember("session", rec.session_id);
    if (rec.tool_name) remember("tool", rec.tool_name);
    remember("agent", agentOf(rec));
    const key = `${rec.tenant}/${rec.session_id}`;
    let lane = state.sessions.get(key);
    if (!lane) {
      lane = { key, tenant: rec.tenant, session: rec.session_id, items: [], calls: new Map(), last: 0 };
      state.sessions.set(key, lane);
    }
    if (rec.received_ms >= lane.last && Array.isArray(rec.facts)) lane.facts = rec.facts; // the session's facts, as last settled
    for (const [name, left] of Object.entries(rec.budgets || {})) { // the budgets the event moved: each as last moved
      lane.budgets = lane.budgets || {};
      lane.budgetsAt = lane.budgetsAt || {};
      if (rec.received_ms >= (lane.budgetsAt[name] || 0)) [lane.budgets[name], lane.budgetsAt[name]] = [left, rec.received_ms];
    }
    lane.last = Math.max(lane.last, rec.received_ms);
    const useId = rec.tool_use_id || (rec.input && rec.input.tool_use_id);
    if (rec.event === "PreToolUse" && useId) lane.calls.set(useId, rec);
    const pre = useId && /^PostToolUse/.test(rec.event) ? lane.calls.get(useId) : null;
    if (pre) {
      pre.__durationMs = rec.received_ms - pre.received_ms; // the tool call, from its PreToolUse to its result
      pre.__result = rec;
    } else {
      lane.items.push(rec);
      if (lane.items.length > MAX_CHIPS) lane.items.shift();
    }
    state.lanesDirty = true;
  }

  function remember(kind, value) {
    const seen = state.seen[kind];
    if (!value || seen.has(value) || seen.size >= 300) return;
    seen.add(value);
    $(`l-${kind}`).append(el("option", { value }));
  }

  function trim() {
    const extra = state.records.length - MAX_RECORDS;
    if (extra > 0) {
      for (const rec of state.records.splice(0, extra)) state.byId.delete(rec.log_id);
    }
    if (state.sessions.size > 400) {
      const oldest = [...state.sessions.values()].sort((a, b) => a.last - b.last);
      for (const lane of oldest.slice(0, state.sessions.size - 400)) state.sessions.delete(lane.key);
    }
  }

  function countLive(verdict, now) {
    const second = Math.floor(now / 1000);
    let last = state.seconds[state.seconds.length - 1];
    if (!last || last.second !== second) {
      last = { second, n: 0, blocked: 0 };
      state.seconds.push(last);
      while (state.seconds[0].second <= second - 60) state.seconds.shift();
    }
    last.n += 1;
    if (verdict === "deny" || verdict === "block") last.blocked += 1;
  }

  // -- filters -------------------------------------------------------------------------------------------------

  function filters() {
    return {
      tenant: $("f-tenant").value.trim(),
      session: $("f-session").value.trim(),
      tool: $("f-tool").value.trim(),
      agent: $("f-agent").value.trim().toLowerCase(),
      decision: $("f-decision").value,
    };
  }

  // The filters hold what the page shows (the suggestions are visible() values): they match that.
  function matches(rec, f = filters()) {
    return (!f.tenant || visible(rec.tenant) === visible(f.tenant))
      && (!f.session || visible(rec.session_id).startsWith(visible(f.session)))
      && (!f.tool || visible(rec.tool_name || "") === visible(f.tool))
      && (!f.agent || visible(agentOf(rec)) === visible(f.agent))
      && (!f.decision || rec.verdict === f.decision || rec.decision === f.decision);
  }

  // -- the feed ------------------------------------------------------------------------------------------------

  const reasonOfRecord = (rec) => rec.reason || reasonOf(rec.output);

  function row(rec) {
    const reason = reasonOfRecord(rec) || inputSummary(rec.input);
    const latency = rec.decided_ms - rec.received_ms;
    const item = el("li", { "data-id": rec.log_id, "data-verdict": rec.verdict, title: reason },
      el("span", { class: "t", text: clock(rec.received_ms) }),
      el("span", {}, badge(rec.verdict)),
      el("span", { class: "agent", text: agentOf(rec) }),
      el("span", { class: "who", text: `${rec.tenant}/${rec.session_id}` }),
      el("span", { class: "what", text: what(rec) }),
      el("span", { class: "lat", text: `${latency} ms` }),
      el("span", { class: "reason", text: reason }));
    if (state.selected === rec.log_id) item.classList.add("selected");
    return item;
  }

  function prependRows(records) {
    const feed = $("feed");
    if (records.length) {
      const fragment = document.createDocumentFragment();
      const newest = records.slice(-MAX_ROWS);
      for (let i = newest.length - 1; i >= 0; i -= 1) fragment.append(row(newest[i]));
      feed.prepend(fragment);
      while (feed.childElementCount > MAX_ROWS) feed.lastElementChild.remove();
    }
    updateShown();
  }

  function renderFeed() {
    const f = filters();
    const rows = [];
    for (let i = state.records.length - 1; i >= 0 && rows.length < MAX_ROWS; i -= 1) {
      if (matches(state.records[i], f)) rows.push(row(state.records[i]));
    }
    $("feed").replaceChildren(...rows);
    updateShown();
    renderLanes(Date.now());
  }

  function updateShown() {
    const count = $("feed").childElementCount;
    $("feed-empty").hidden = count > 0;
    $("shown").textContent = `${count} shown of ${state.records.length} kept`;
  }

  // -- session lanes -------------------------------------------------------------------------------------------

  // A budget's units left as a lane shows them: whole units, thousands as k (a token budget's 48k).
  function budgetLeft(left) {
    const n = Math.max(0, Math.floor(Number(left) || 0));
    return n >= 10000 ? `${Math.floor(n / 1000)}k` : String(n);
  }

  function renderLanes(now) {
    state.lanesAt = now;
    state.lanesDirty = false;
    const f = filters();
    const lanes = [...state.sessions.values()]
      .filter((lane) => (!f.tenant || visible(lane.tenant) === visible(f.tenant))
        && (!f.session || visible(lane.session).startsWith(visible(f.session))))
      .sort((a, b) => b.last - a.last)
      .slice(0, MAX_LANES);
    const nodes = lanes.map((lane) => {
      const chips = lane.items.map((rec) => {
        const label = rec.tool_name || rec.event;
        const text = rec.__durationMs !== undefined ? `${label} ${formatDuration(rec.__durationMs)}` : label;
        const chip = el("span", {
          class: `chip v-${rec.verdict}${rec.__durationMs !== undefined ? " call" : ""}`,
          "data-id": rec.log_id,
          text,
          title: `${clock(rec.received_ms)} ${what(rec)} -> ${rec.verdict}`,
        });
        if (state.selected === rec.log_id) chip.classList.add("selected");
        return chip;
      });
      const events = el("div", { class: "lane-events" }, ...chips);
      const facts = (lane.facts || []).map((name) => el("span", { class: "fact", text: name, title: "session fact" }));
      const budgets = Object.entries(lane.budgets || {}).map(([name, left]) => el("span", {
        class: `budget${left > 0 ? "" : " spent"}`, "data-budget": name, text: `${name}: ${budgetLeft(left)} left`,
        title: "session budget: units left once the session's last event that counted toward it settled",
      }));
      const node = el("div", { class: "lane", "data-session": lane.session },
        el("span", { class: "lane-name", text: `${lane.tenant}/${lane.session}`, title: lane.key }),
        ...facts, ...budgets, events);
      return node;
    });
    $("lanes").replaceChildren(...nodes);
  }

  function formatDuration(ms) {
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
  }

  // -- counters ------------------------------------------------------------------------------------------------

  function renderCounters(now) {
    const second = Math.floor(now / 1000);
    let recent = 0;
    let total = 0;
    let blocked = 0;
    for (const bucket of state.seconds) {
      if (bucket.second <= second - 60) continue;
      if (bucket.second > second - 10) recent += bucket.n;
      total += bucket.n;
      blocked += bucket.blocked;
    }
    $("c-rate").textContent = (recent / 10).toFixed(recent >= 100 ? 0 : 1);
    $("c-block").textContent = total ? `${Math.round((100 * blocked) / total)}%` : "-";
    $("c-failopen").textContent = String(state.failOpens);
  }

  async function pollReadiness() {
    try {
      const response = await fetch("/readyz", { cache: "no-store" });
      const body = await response.json();
      const dispatchers = body.checks && body.checks.dispatchers;
      $("c-dispatchers").textContent = dispatchers ? String(dispatchers.alive) : "?";
    } catch (err) {
      $("c-dispatchers").textContent = "?";
    }
    pollFreezes();
  }

  // The freezes this token may see (GET /v1/freeze), as a banner: frozen tool calls are denied.
  async function pollFreezes() {
    let frozen = [];
    try {
      const response = await fetch("/v1/freeze", { headers: authHeaders(), cache: "no-store" });
      if (response.ok) frozen = (await response.json()).freezes || [];
    } catch (err) {
      frozen = [];
    }
    const banner = $("freeze-banner");
    banner.hidden = frozen.length === 0;
    banner.textContent = frozen
      .map((f) => {
        const until = f.until ? `until ${f.until}` : "until lifted";
        return `FROZEN: tenant ${f.tenant} (${f.tools.join("|")}) by ${f.by} since ${f.since}, ${until}${f.reason ? `: ${f.reason}` : ""}`;
      })
      .join(" \u00b7 ");
  }

  // -- the detail pane -----------------------------------------------------------------------------------------

  function decidedBy(rec) {
    if (rec.verdict === "fail-open") return `no decision reached the agent: fail-open (${rec.fail_open || "unknown"})`;
    const hooks = (rec.hooks || []).filter((h) => !h.shadow);
    const reason = reasonOfRecord(rec);
    const found = /\(rule: (.+)\)$/.exec(reason) || /by rule (.+)$/.exec(reason);
    const parts = [];
    let by = hooks.filter((h) => h.outcome === "block");
    if (found) {
      parts.push(`rule ${found[1]}`);
      if (!by.length) by = hooks.filter((h) => h.type === "rule");
    } else if (!by.length && rec.decision !== "none" && hooks.length === 1) {
      by = hooks;
    }
    for (const h of by) parts.push(`${h.type} handler ${short(h.id)}`);
    if (parts.length) return parts.join(" · ");
    if (rec.decision === "none") return hooks.length ? "no handler gave an opinion" : "no handler ran";
    return `${hooks.length} handlers, merged (see below)`;
  }

  function select(id) {
    const rec = state.byId.get(id);
    if (!rec) return;
    state.selected = id;
    for (const node of document.querySelectorAll(".selected")) node.classList.remove("selected");
    for (const node of document.querySelectorAll(`[data-id="${CSS.escape(id)}"]`)) node.classList.add("selected");
    const pane = $("detail");
    const facts = [
      ["time", stamp(rec.received_ms)],
      ["agent", agentOf(rec)],
      ["tenant", rec.tenant],
      ["session", rec.session_id],
      ["outcome", rec.outcome + (rec.fail_open ? ` (${rec.fail_open})` : "")],
      ["decision", rec.decision],
      ["latency", `${rec.decided_ms - rec.received_ms} ms`],
      ["policy version", rec.revision || "-"],
      ["event id", rec.id],
      ["log id", rec.log_id],
    ];
    if (rec.__durationMs !== undefined) facts.push(["tool call", formatDuration(rec.__durationMs)]);
    if (rec.trace_id) facts.push(["trace id", rec.trace_id]);
    if (rec.budgets) {
      facts.push(["budgets left", Object.entries(rec.budgets).map(([name, left]) => `${name}: ${left}`).join(", ")]);
    }
    const dl = el("dl");
    for (const [name, value] of facts) dl.append(el("dt", { text: name }), el("dd", { text: String(value) }));
    if (rec.masked && rec.masked.length) {
      dl.append(el("dt", { text: "masked" }),
        el("dd", { class: "masked", text: rec.masked.map(
          (m) => (typeof m === "string" ? m : `${m.pointer} (${m.detector})`)).join(", ") }));
    }
    const handlers = el("table", {}, el("tr", {}, ...["handler", "type", "outcome", "ms", "reason"].map(
      (h) => el("th", { text: h }))));
    for (const h of rec.hooks || []) {
      handlers.append(el("tr", {},
        el("td", { text: short(h.id) + (h.shadow ? " (shadow)" : ""), title: h.id || "" }),
        el("td", { text: h.type || "" }), el("td", { text: h.outcome || "" }),
        el("td", { text: h.duration_ms === undefined ? "" : String(h.duration_ms) }),
        el("td", { text: h.reason || "" })));
    }
    const shadow = (rec.shadow || []).map((s) => el("li", {},
      `would ${s.decision} `, el("span", { class: "muted", text: `(${(s.handlers || []).map(short).join(", ")})` })));
    const reason = reasonOfRecord(rec);
    pane.replaceChildren(...[
      el("h3", {}, badge(rec.verdict), el("span", { text: what(rec) })),
      el("div", { class: "decided" }, el("b", { text: "decided by: " }), decidedBy(rec),
        reason ? el("div", { class: "reason", text: reason }) : null),
      dl,
      el("h2", { text: `handlers (${(rec.hooks || []).length})` }),
      (rec.hooks || []).length ? handlers : el("p", { class: "muted", text: "no handler ran" }),
      shadow.length ? el("h2", { text: "shadow results" }) : null,
      shadow.length ? el("ul", {}, ...shadow) : null,
      el("h2", { text: "input (as in the log)" }),
      el("pre", { lines: JSON.stringify(rec.input, null, 2) }),
      el("h2", { text: "output" }),
      el("pre", { lines: JSON.stringify(rec.output, null, 2) }),
    ].filter(Boolean));
  }

  // -- the policy what-if ---------------------------------------------------------------------------------------

  async function runReplay() {
    const button = $("w-run");
    const result = $("w-result");
    const policy = $("w-policy").value;
    if (!policy.trim()) {
      result.replaceChildren(el("p", { class: "error", text: "Paste or upload a candidate policy first." }));
      return;
    }
    const body = { policy };
    if ($("w-since").value.trim()) body.since = $("w-since").value.trim();
    if ($("w-until").value.trim()) body.until = $("w-until").value.trim();
    const tenants = $("w-tenant").value.split(",").map((t) => t.trim()).filter(Boolean);
    if (tenants.length) body.tenant = tenants;
    button.disabled = true;
    button.textContent = "Replaying…";
    result.replaceChildren(el("p", { class: "muted", text: "Replaying the recorded events…" }));
    try {
      const response = await fetch("/v1/policy/replay", {
        method: "POST",
        headers: { ...authHeaders(), "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      const answer = await response.json().catch(() => ({ detail: `HTTP ${response.status}` }));
      if (response.status === 401) askToken("Policy replay needs an org-admin token.");
      if (!response.ok) {
        result.replaceChildren(el("pre", { class: "error", text: answer.detail || answer.error || "failed" }));
      } else {
        renderReplay(answer);
      }
    } catch (err) {
      result.replaceChildren(el("p", { class: "error", text: `The gateway did not answer: ${err}` }));
    } finally {
      button.disabled = false;
      button.textContent = "Replay";
    }
  }

  function table(headers, rows) {
    return el("table", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h }))),
      ...rows.map((cells) => el("tr", {}, ...cells.map((cell) => el("td", {},
        cell instanceof Node ? cell : String(cell))))));
  }

  function renderReplay(report) {
    const change = (from, to) => el("span", {}, badge(from), " → ", badge(to));
    const nodes = [el("p", { class: "summary" },
      el("b", { text: `${report.changed} of ${report.replayed}` }),
      ` recorded events would be decided differently (candidate revision ${report.candidate.revision}).`)];
    if (report.truncated) nodes.push(el("p", { class: "muted", text: `Stopped after ${report.records} records.` }));
    nodes.push(...limitNotes(report));
    if (report.changes.length) {
      nodes.push(el("h3", { text: "changes" }),
        table(["change", "events"], report.changes.map((c) => [change(c.from, c.to), c.count])));
      nodes.push(el("h3", { text: "top rules responsible" }),
        table(["rule or hook", "events"], report.top_rules.map((r) => [r.rule, r.count])));
      nodes.push(el("h3", { text: "examples" }), table(["time", "session", "event", "input", "change", "why", "notes"],
        report.examples.map((x) => [stamp(x.received_ms), `${x.tenant}/${x.session_id}`,
          x.event + (x.tool_name ? `(${x.tool_name})` : ""), x.input, change(x.recorded, x.candidate),
          (x.responsible || []).join("; "),
          [x.not_replayed.length ? `not replayed: ${x.not_replayed.join(", ")}` : "",
            x.redaction_may_matter ? `redacted input (${x.masked.length} masked)` : ""].filter(Boolean).join("; ")])));
    }
    const skipped = report.not_replayed;
    if (Object.keys(skipped.handlers).length) {
      const kinds = Object.entries(skipped.handlers).map(([type, n]) => `${n} ${type}`).join(", ");
      nodes.push(el("p", { class: "muted", text: `Not replayed (counted as no opinion): ${kinds} on ${skipped.events} `
        + `events; ${skipped.changed} of the changes involve one.` }));
    }
    if (report.redacted.flagged) {
      nodes.push(el("p", { class: "masked", text: `${report.redacted.flagged} events had masked (redacted) input fields `
        + "and changed or matched a rule: the real input may decide differently." }));
    }
    $("w-result").replaceChildren(...nodes);
  }

  // A report that ran out of its time budget, and the logged inputs that cannot be judged (as live: deny and ask
  // rules meet them).
  function limitNotes(report) {
    const notes = [];
    if (report.partial) notes.push(el("p", { class: "error partial", text: `Partial: ${report.stopped}` }));
    const unjudged = report.unjudged;
    if (unjudged && unjudged.events) {
      const first = unjudged.examples.length ? ` (e.g. ${unjudged.examples[0].reason})` : "";
      notes.push(el("p", { class: "muted unjudged", text: `${unjudged.events} logged inputs cannot be judged, `
        + `as live: deny and ask rules meet them${first}.` }));
    }
    return notes;
  }

  // -- coverage of the running policy --------------------------------------------------------------------------

  async function runCoverage() {
    const button = $("w-coverage");
    const result = $("w-result");
    const query = new URLSearchParams();
    if ($("w-since").value.trim()) query.set("since", $("w-since").value.trim());
    if ($("w-until").value.trim()) query.set("until", $("w-until").value.trim());
    for (const tenant of $("w-tenant").value.split(",").map((t) => t.trim()).filter(Boolean)) query.append("tenant", tenant);
    button.disabled = true;
    result.replaceChildren(el("p", { class: "muted", text: "Reading the decision log…" }));
    try {
      const response = await fetch(`/v1/policy/coverage?${query}`, { headers: authHeaders(), cache: "no-store" });
      const answer = await response.json().catch(() => ({ detail: `HTTP ${response.status}` }));
      if (response.status === 401) askToken("Policy coverage needs an org-admin token.");
      if (!response.ok) {
        result.replaceChildren(el("pre", { class: "error", text: answer.detail || answer.error || "failed" }));
      } else {
        renderCoverage(answer);
      }
    } catch (err) {
      result.replaceChildren(el("p", { class: "error", text: `The gateway did not answer: ${err}` }));
    } finally {
      button.disabled = false;
    }
  }

  function renderCoverage(report) {
    const rows = (items) => items.map((c) => [c.where, c.label, c.decided, c.matched]);
    const headers = ["where", "handler or rule", "decided", "matched, not deciding"];
    const nodes = [el("p", { class: "summary" }, el("b", { text: `${report.events} logged events` }),
      ` against the running policy (revision ${report.revision}, ${(report.tenants || []).join(", ") || "all tenants"}).`)];
    nodes.push(...limitNotes(report));
    nodes.push(el("h3", { text: "handlers" }), table(headers, rows(report.handlers)));
    if (report.rules.length) {
      const rules = table(headers, rows(report.rules));
      rules.classList.add("rules");
      nodes.push(el("h3", { text: "rules" }), rules);
    }
    nodes.push(el("h3", { text: `never matched (${report.never_matched.length})` }),
      el("ul", { class: "never" }, ...report.never_matched.map((c) => el("li", { text: `${c.where} ${c.label}` }))));
    nodes.push(el("h3", { text: `tools no handler covers (${report.uncovered_tools.length})` }),
      el("ul", {}, ...report.uncovered_tools.map((t) => el("li", { text: `${t.tool} (${t.events} events)` }))));
    $("w-result").replaceChildren(...nodes);
  }

  // -- wiring --------------------------------------------------------------------------------------------------

  function showView(name) {
    for (const tab of document.querySelectorAll(".tab")) {
      const active = tab.dataset.view === name;
      tab.classList.toggle("active", active);
      tab.setAttribute("aria-selected", String(active));
    }
    for (const view of document.querySelectorAll("main.view")) view.hidden = view.id !== `view-${name}`;
  }

  function start() {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
    for (const id of ["f-tenant", "f-session", "f-agent", "f-tool", "f-decision"]) $(id).addEventListener("input", renderFeed);
    $("f-clear").addEventListener("click", () => {
      for (const id of ["f-tenant", "f-session", "f-agent", "f-tool", "f-decision"]) $(id).value = "";
      renderFeed();
    });
    const pick = (event) => {
      const target = event.target.closest("[data-id]");
      if (target) select(target.dataset.id);
    };
    $("feed").addEventListener("click", pick);
    $("lanes").addEventListener("click", pick);
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      useToken($("token-input").value.trim());
    });
    $("token-none").addEventListener("click", () => useToken(""));
    $("change-token").addEventListener("click", () => askToken(""));
    $("w-run").addEventListener("click", runReplay);
    $("w-coverage").addEventListener("click", runCoverage);
    $("w-file").addEventListener("change", async () => {
      const file = $("w-file").files[0];
      if (file) $("w-policy").value = await file.text();
    });
    setInterval(() => renderCounters(Date.now()), 1000);
    setInterval(pollReadiness, 2000);
    pollReadiness();
    connect();
  }

  start();
})();
