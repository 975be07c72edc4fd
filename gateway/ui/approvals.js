// hookbus console: the Approvals view. Polls GET /v1/approvals every second (the token's tenant, or every
// tenant for an org admin) and answers with POST /v1/approvals/{id}/approve|deny. Agent-written text (the tool
// input, the reason, the trail) goes in with textContent only, with invisible characters made visible.
"use strict";

(() => {
  const TOKEN_KEY = "hookbus.token";
  const NAME_KEY = "hookbus.approver";
  const POLL_MS = 1000;
  const INVISIBLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;
  const visible = (text) =>
    String(text ?? "").replace(INVISIBLE, (ch) => `⟨U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = visible(value);
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children) if (child) node.append(typeof child === "string" ? visible(child) : child);
    return node;
  }

  function headers(json) {
    const token = sessionStorage.getItem(TOKEN_KEY) || "";
    const out = token ? { Authorization: `Bearer ${token}` } : {};
    const name = ($("ap-name").value || "").trim();
    if (name) out["X-Hookbus-Approver"] = name;
    if (json) out["Content-Type"] = "application/json";
    return out;
  }

  const left = (ms) => {
    const s = Math.max(0, Math.round((ms - Date.now()) / 1000));
    return s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s left` : `${s} s left`;
  };

  function card(a) {
    const input = JSON.stringify(a.tool_input, null, 2);
    const edit = el("textarea", { class: "ap-edit", rows: 3, spellcheck: false, placeholder: "edited tool input (JSON), optional" });
    const reason = el("input", { class: "ap-reason", placeholder: "reason the model reads (deny)" });
    const message = el("p", { class: "ap-message error", hidden: true });
    const answer = async (verb, body) => {
      message.hidden = true;
      try {
        const response = await fetch(`/v1/approvals/${encodeURIComponent(a.id)}/${verb}`, {
          method: "POST",
          headers: headers(true),
          body: JSON.stringify(body),
        });
        const reply = await response.json().catch(() => ({}));
        if (!response.ok) {
          message.textContent = visible(reply.detail || `HTTP ${response.status}`);
          message.hidden = false;
          return;
        }
        message.textContent = response.status === 202 ? "one more approver is needed" : `${reply.status || verb}`;
        message.hidden = false;
        poll();
      } catch (err) {
        message.textContent = visible(String(err));
        message.hidden = false;
      }
    };
    const approve = (scope) => () => {
      const body = { for: scope };
      const text = edit.value.trim();
      if (text) {
        try {
          body.input = JSON.parse(text);
        } catch (err) {
          message.textContent = "the edited input is not JSON";
          message.hidden = false;
          return;
        }
      }
      answer("approve", body);
    };
    const trail = el("ol", { class: "ap-trail" });
    for (const t of a.trail || []) trail.append(el("li", { text: `${t.event}${t.tool ? `(${t.tool})` : ""} ${t.decision} ${t.what || ""}` }));
    return el(
      "li",
      { class: "ap-card", "data-approval": a.id },
      el("div", { class: "ap-head" },
        el("b", { text: `${a.tool_name || a.event}` }),
        el("span", { class: "muted", text: ` ${a.tenant} · ${a.agent} · session ${a.session_id}` }),
        el("span", { class: "ap-left", text: left(a.deadline_ms) }),
      ),
      el("p", { class: "ap-why", text: a.reason }),
      el("pre", { class: "ap-input", text: input }),
      a.approvers_needed > 1 ? el("p", { class: "muted", text: `needs ${a.approvers_needed} approvers; approved by: ${(a.approvers || []).join(", ") || "nobody yet"}` }) : null,
      (a.facts || []).length ? el("p", { class: "ap-facts muted", text: `the session's facts: ${a.facts.join(", ")}` }) : null,
      (a.trail || []).length ? el("details", {}, el("summary", { text: "the session's last events" }), trail) : null,
      edit,
      el("div", { class: "ap-buttons" },
        el("button", { class: "primary ap-once", text: "Approve once", onclick: approve("once") }),
        el("button", { class: "ap-session", text: "Approve for the session", onclick: approve("session") }),
        reason,
        el("button", { class: "danger ap-deny", text: "Deny", onclick: () => answer("deny", { reason: reason.value.trim() }) }),
      ),
      message,
    );
  }

  let shown = "";
  async function poll() {
    let found = null;
    try {
      const response = await fetch("/v1/approvals", { headers: headers(false), cache: "no-store" });
      if (response.ok) found = (await response.json()).approvals || [];
    } catch (err) {
      found = null;
    }
    $("ap-count").textContent = found && found.length ? String(found.length) : "";
    if (found === null) return;
    const ids = found.map((a) => a.id).join(",");
    const list = $("ap-list");
    if (ids !== shown) {
      shown = ids;
      list.replaceChildren(...found.map(card));
    } else {
      for (const a of found) {
        const left_ = list.querySelector(`[data-approval="${a.id}"] .ap-left`);
        if (left_) left_.textContent = left(a.deadline_ms);
      }
    }
    $("ap-empty").hidden = found.length > 0;
  }

  function start() {
    $("ap-name").value = sessionStorage.getItem(NAME_KEY) || "";
    $("ap-name").addEventListener("change", () => sessionStorage.setItem(NAME_KEY, $("ap-name").value.trim()));
    setInterval(poll, POLL_MS);
    poll();
  }

  start();
})();
