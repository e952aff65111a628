"use strict";
// acx report: task table and task pages rendered from the embedded JSON. Every data string is
// inserted as text (textContent), never as markup. The route lives in location.hash so a reload
// (the live view reloads while a run is in progress) keeps the page and its filters.
(function () {
  const INDEX = JSON.parse(document.getElementById("acx-index").textContent);
  const F = {};
  INDEX.fields.forEach((name, i) => { F[name] = i; });
  const PAGE = 100;
  const detailsCache = {};
  let refocus = false;

  function details(run) {
    if (!(run in detailsCache)) {
      detailsCache[run] = JSON.parse(document.getElementById("acx-details-" + run).textContent);
    }
    return detailsCache[run];
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = String(v);
      else if (k === "onclick" || k === "oninput" || k === "onchange") node[k] = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(digits === undefined ? 3 : digits);
    if (typeof v === "boolean") return String(v);
    if (typeof v === "string") return v;
    return JSON.stringify(v);
  }

  function pre(value) {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    return el("pre", { text: text });
  }

  function collapsible(summary, body, open) {
    const d = el("details", { open: !!open }, el("summary", { text: summary }));
    d.appendChild(body);
    return d;
  }

  // ---- routing ------------------------------------------------------------------------------
  function parseHash() {
    const raw = decodeURIComponent(location.hash.replace(/^#/, "")) || "run/0";
    const q = raw.indexOf("?");
    const path = (q < 0 ? raw : raw.slice(0, q)).split("/");
    const params = new URLSearchParams(q < 0 ? "" : raw.slice(q + 1));
    return { path, params };
  }

  function show(route) {
    document.querySelectorAll("section.page").forEach((s) => { s.hidden = s.dataset.route !== route; });
    document.querySelectorAll("#nav a").forEach((a) => {
      a.classList.toggle("active", a.getAttribute("href") === "#" + route);
    });
    window.scrollTo(0, 0);
  }

  function route() {
    const { path, params } = parseHash();
    const kind = path[0];
    const run = Math.max(0, Math.min(INDEX.runs.length - 1, parseInt(path[1] || "0", 10) || 0));
    if (kind === "tasks") { renderTable(run, params); show("tasks"); }
    else if (kind === "task") { renderTask(run, parseInt(path[2] || "0", 10) || 0); show("task"); }
    else if (kind === "compare" && document.getElementById("page-compare-" + path[1])) show("compare/" + path[1]);
    else show("run/" + run);
  }

  // ---- task table ---------------------------------------------------------------------------
  function scoreClass(s) {
    if (s === null || s === undefined) return "none";
    if (s >= 1) return "pass";
    if (s <= 0) return "fail";
    return "partial";
  }

  function filtered(rows, p) {
    const state = p.get("state") || "", status = p.get("status") || "", cat = p.get("category") || "";
    const code = p.get("code") || "", score = p.get("score") || "", q = (p.get("q") || "").toLowerCase();
    const out = [];
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i];
      if (state && r[F.state] !== state) continue;
      if (status && r[F.status] !== status) continue;
      if (cat && r[F.category] !== cat) continue;
      if (code && !(r[F.codes] || []).includes(code)) continue;
      if (score && scoreClass(r[F.score]) !== score) continue;
      if (q) {
        const hay = (r[F.task_id] + " " + r[F.category] + " " + (r[F.codes] || []).join(" ") + " " + (r[F.answer] || "")).toLowerCase();
        if (!hay.includes(q)) continue;
      }
      out.push(i);
    }
    const sort = p.get("sort"), desc = p.get("desc") === "1";
    if (sort && sort in F) {
      const c = F[sort];
      out.sort((a, b) => {
        let x = rows[a][c], y = rows[b][c];
        if (Array.isArray(x)) x = x.join(","); if (Array.isArray(y)) y = y.join(",");
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        const r = x < y ? -1 : x > y ? 1 : 0;
        return desc ? -r : r;
      });
    }
    return out;
  }

  function setParam(run, p, key, value) {
    if (value) p.set(key, value); else p.delete(key);
    if (key !== "page") p.delete("page");
    const qs = p.toString();
    location.hash = "tasks/" + run + (qs ? "?" + qs : "");
  }

  function distinct(rows, col, multi) {
    const seen = new Set();
    rows.forEach((r) => { if (multi) (r[col] || []).forEach((v) => seen.add(v)); else if (r[col] !== null) seen.add(r[col]); });
    return Array.from(seen).sort();
  }

  function select(name, label, values, current, onchange, labels) {
    const s = el("select", { name: name, "data-testid": "filter-" + name, onchange: (e) => onchange(e.target.value) });
    s.appendChild(el("option", { value: "", text: "all" }));
    values.forEach((v) => s.appendChild(el("option", { value: v, text: labels ? labels[v] || v : v, selected: v === current })));
    return el("label", {}, label + " ", s);
  }

  function renderTable(run, p) {
    const root = document.getElementById("page-tasks");
    root.textContent = "";
    const info = INDEX.runs[run], rows = info.rows;
    const set = (k, v) => setParam(run, p, k, v);
    root.appendChild(el("h2", { text: "Tasks — " + info.name }));
    const bar = el("div", { class: "filters" });
    bar.appendChild(select("state", "state", distinct(rows, F.state), p.get("state") || "", (v) => set("state", v)));
    bar.appendChild(select("status", "attempt status", distinct(rows, F.status), p.get("status") || "", (v) => set("status", v)));
    bar.appendChild(select("category", "category", distinct(rows, F.category), p.get("category") || "", (v) => set("category", v)));
    bar.appendChild(select("code", "error code", distinct(rows, F.codes, true), p.get("code") || "", (v) => set("code", v)));
    bar.appendChild(select("score", (info.primary || "score"), ["pass", "fail", "partial", "none"], p.get("score") || "",
      (v) => set("score", v), { pass: "1 (pass)", fail: "0 (fail)", partial: "between 0 and 1", none: "unscored" }));
    const search = el("input", { type: "search", placeholder: "search id, answer, code", value: p.get("q") || "", "data-testid": "search" });
    // Filter as the user types (debounced) or on Enter; the table is rebuilt, so the search box
    // gets its focus back.
    let timer = null;
    const commit = () => { clearTimeout(timer); if (search.value.trim() !== (p.get("q") || "")) { refocus = true; set("q", search.value.trim()); } };
    search.oninput = () => { clearTimeout(timer); timer = setTimeout(commit, 250); };
    search.onkeydown = (e) => { if (e.key === "Enter") commit(); };
    bar.appendChild(el("label", {}, "text ", search));
    root.appendChild(bar);
    const idx = filtered(rows, p);
    const pages = Math.max(1, Math.ceil(idx.length / PAGE));
    const page = Math.min(pages - 1, Math.max(0, parseInt(p.get("page") || "0", 10) || 0));
    const pager = el("div", { class: "pager" },
      el("span", { "data-testid": "count", text: idx.length + " of " + rows.length + " tasks" }),
      el("button", { text: "‹ prev", disabled: page === 0, onclick: () => set("page", String(page - 1)) }),
      el("span", { text: "page " + (page + 1) + " / " + pages }),
      el("button", { text: "next ›", disabled: page >= pages - 1, onclick: () => set("page", String(page + 1)) }));
    root.appendChild(pager);
    const cols = [["task_id", "task"], ["state", "state"], ["category", "category"], ["status", "status"],
      ["score", info.primary || "score"], ["codes", "error codes"], ["attempts", "attempts"], ["retries", "retries"],
      ["duration", "duration (s)"], ["tokens", "tokens"], ["answer", "final answer"]];
    const head = el("tr");
    cols.forEach(([key, label]) => {
      const sorted = p.get("sort") === key;
      const arrow = sorted ? (p.get("desc") === "1" ? " ▼" : " ▲") : "";
      head.appendChild(el("th", { class: "sortable", "data-sort": key, text: label + arrow, onclick: () => {
        p.set("desc", sorted && p.get("desc") !== "1" ? "1" : "0");
        setParam(run, p, "sort", key);
      } }));
    });
    const body = el("tbody");
    for (const i of idx.slice(page * PAGE, (page + 1) * PAGE)) {
      const r = rows[i];
      body.appendChild(el("tr", { "data-task": r[F.task_id] },
        el("td", {}, el("a", { href: "#task/" + run + "/" + i, text: r[F.task_id] })),
        el("td", { class: "state-" + r[F.state], text: r[F.state] }),
        el("td", { text: r[F.category] }),
        el("td", { text: fmt(r[F.status]) }),
        el("td", { class: "num", text: fmt(r[F.score]) }),
        el("td", { text: (r[F.codes] || []).join(", ") }),
        el("td", { class: "num", text: fmt(r[F.attempts]) }),
        el("td", { class: "num", text: fmt(r[F.retries]) }),
        el("td", { class: "num", text: fmt(r[F.duration], 2) }),
        el("td", { class: "num", text: fmt(r[F.tokens], 0) }),
        el("td", { text: r[F.answer] || "" })));
    }
    root.appendChild(el("table", { class: "grid", "data-testid": "task-table" }, el("thead", {}, head), body));
    if (refocus) { refocus = false; search.focus(); search.setSelectionRange(search.value.length, search.value.length); }
  }

  // ---- task page ----------------------------------------------------------------------------
  // Plan fields shown on a task page: [plan path, plan provenance key, request provenance key].
  const PLAN_FIELDS = [
    ["environment.id", null, "environment.id"],
    ["environment.setup.image", "environment.setup.image", "environment.setup.image"],
    ["evaluation_environment_mode", "evaluation_environment_mode", "environment.evaluation_environment_mode"],
    ["run_network_policy.network_mode", "run_network_policy", "environment.run_network_policy"],
    ["evaluation_network_policy.network_mode", "evaluation_network_policy", "environment.evaluation_network_policy"],
    ["run_timeout_seconds", "run_timeout_seconds", "execution.run_timeout_seconds"],
    ["evaluation_timeout_seconds", "evaluation_timeout_seconds", "execution.evaluation_timeout_seconds"],
    ["run_timer_compensation_seconds", "run_timer_compensation_seconds", "execution.run_timer_compensation_seconds"],
    ["runresult_collect_timeout_seconds", "runresult_collect_timeout_seconds", "execution.runresult_collect_timeout_seconds"],
    ["applied_recipes", null, "execution.enabled_recipes"],
    ["collect_artifacts", "collect_artifacts", null],
    ["save_artifacts", "save_artifacts", "execution.save_artifacts"],
    ["plan_hash", null, null]];

  function getPath(obj, path) {
    let cur = obj;
    for (const part of path.split(".")) {
      if (cur === null || typeof cur !== "object" || !(part in cur)) return undefined;
      cur = cur[part];
    }
    return cur;
  }

  function chainNode(chain) {
    if (!Array.isArray(chain) || !chain.length) return el("span", { class: "chain", text: "" });
    const node = el("span", { class: "chain" });
    chain.forEach((c, i) => {
      if (i) node.appendChild(document.createTextNode(" → "));
      node.appendChild(el("span", { class: i === chain.length - 1 ? "winner" : "",
        text: (c.layer || "?") + (c.source ? " (" + c.source + ")" : "") + ": " + fmt(c.value) }));
    });
    return node;
  }

  function planTable(info, taskId, plan) {
    const prov = info.provenance || {};
    const taskProv = (prov.tasks || {})[taskId] || {};
    const table = el("table", { class: "grid", "data-testid": "plan" },
      el("thead", {}, el("tr", {}, el("th", { text: "plan field" }), el("th", { text: "value" }), el("th", { text: "set by (lowest first, winner last)" }))));
    const body = el("tbody");
    for (const [field, planKey, requestKey] of PLAN_FIELDS) {
      const value = getPath(plan, field);
      if (value === undefined) continue;
      let chain = null;
      if (planKey && taskProv[planKey] !== undefined && prov.chains) chain = prov.chains[taskProv[planKey]];
      else if (requestKey && prov.request) chain = prov.request[requestKey];
      const none = !prov.request ? "provenance not recorded (provenance.json is written by acx run)"
        : planKey && !prov.tasks_complete && !(taskId in (prov.tasks || {})) ? "request-level only (plan provenance not recorded for this task)"
        : "set by the planner";
      body.appendChild(el("tr", {}, el("td", { text: field }), el("td", { text: fmt(value) }),
        el("td", {}, chain ? chainNode(chain) : el("span", { class: "muted", text: none }))));
    }
    table.appendChild(body);
    return el("div", {}, table, collapsible("full resolved plan", pre(plan)));
  }

  function contentNode(content) {
    if (content === null || content === undefined || content === "") return null;
    if (typeof content === "string") return pre(content);
    if (Array.isArray(content)) {
      const box = el("div");
      content.forEach((part) => {
        if (part && typeof part === "object" && typeof part.text === "string") box.appendChild(pre(part.text));
        else box.appendChild(pre(part));
      });
      return box;
    }
    return pre(content);
  }

  function msg(role, ...children) {
    return el("div", { class: "msg " + role }, el("div", { class: "role", text: role }), ...children);
  }

  function toolCallNode(call) {
    const fn = (call && call.function) || call || {};
    const name = fn.name || call.name || "tool";
    let args = fn.arguments !== undefined ? fn.arguments : call.arguments;
    if (typeof args === "string") { try { args = JSON.parse(args); } catch (e) { /* shown as written */ } }
    return collapsible("tool call: " + name + (call.id ? " (" + call.id + ")" : ""), pre(args === undefined ? call : args), true);
  }

  function observationNode(obs) {
    if (obs === null || obs === undefined || obs === "") return null;
    const list = Array.isArray(obs) ? obs : [obs];
    const box = el("div");
    list.forEach((o) => {
      const text = (o && typeof o === "object") ? (o.content !== undefined ? o.content : o) : o;
      const callId = o && (o.tool_call_id || o.source_call_id);
      const label = "observation" + (callId ? " (" + callId + ")" : "");
      box.appendChild(msg("observation", collapsible(label + " — " + String(typeof text === "string" ? text.length + " chars" : "json"), contentNode(text) || pre(""), false)));
    });
    return box;
  }

  function trajectoryNode(traj) {
    if (traj === null || traj === undefined) return el("p", { class: "muted", text: "no trajectory recorded" });
    const box = el("div", { class: "trajectory", "data-testid": "trajectory" });
    if (traj && Array.isArray(traj.steps)) {
      box.appendChild(el("p", { class: "muted", text: (traj.schema_version || "trajectory") + " — " + traj.steps.length + " step(s)" +
        (traj.started_at ? ", " + traj.started_at + " → " + (traj.finished_at || "…") : "") }));
      traj.steps.forEach((step, i) => {
        const who = [step.role, step.model].filter((x) => x).join(", ");
        const s = el("div", { class: "step" }, el("div", { class: "step-meta",
          text: "step " + (step.step_id !== undefined ? step.step_id : i + 1) + (who ? " — " + who : "") }));
        if (step.system_prompt) s.appendChild(msg("system", collapsible("system prompt", contentNode(step.system_prompt), false)));
        if (step.tools && step.tools.length) s.appendChild(collapsible("tools offered (" + step.tools.length + ")", pre(step.tools), false));
        if (step.user_content) s.appendChild(msg("user", contentNode(step.user_content)));
        const a = step.assistant_content;
        if (a) {
          const m = msg("assistant");
          if (a.reasoning_content) m.appendChild(collapsible("reasoning", contentNode(a.reasoning_content), false));
          const c = contentNode(a.content);
          if (c) m.appendChild(c);
          (a.tool_calls || []).forEach((call) => m.appendChild(toolCallNode(call)));
          s.appendChild(m);
        }
        const o = observationNode(step.observation);
        if (o) s.appendChild(o);
        if (step.metric) {
          const mt = step.metric;
          s.appendChild(el("div", { class: "step-meta", text: "tokens in " + fmt(mt.prompt_tokens_len, 0) + ", out " +
            fmt(mt.completion_tokens_len, 0) + "; model " + fmt(mt.llm_infer_ms, 0) + " ms; tools " + fmt(mt.env_action_ms, 0) +
            " ms" + (mt.stop_reason ? "; stop: " + mt.stop_reason : "") }));
        }
        box.appendChild(s);
      });
      return box;
    }
    const messages = Array.isArray(traj) ? traj : (traj && Array.isArray(traj.messages) ? traj.messages : null);
    if (messages && messages.every((m) => m && typeof m === "object" && "role" in m)) {
      messages.forEach((m) => {
        const node = msg(m.role === "tool" ? "tool" : String(m.role));
        const c = contentNode(m.content);
        if (c) node.appendChild(m.role === "tool" || m.role === "system" ? collapsible(m.role, c, false) : c);
        (m.tool_calls || []).forEach((call) => node.appendChild(toolCallNode(call)));
        box.appendChild(node);
      });
      return box;
    }
    box.appendChild(pre(traj));
    return box;
  }

  function issuesNode(issues) {
    if (!issues || !issues.length) return el("p", { class: "muted", text: "no issues" });
    const t = el("table", { class: "grid", "data-testid": "issues" },
      el("thead", {}, el("tr", {}, ...["severity", "phase", "code", "message"].map((h) => el("th", { text: h })))));
    const b = el("tbody");
    issues.forEach((i) => b.appendChild(el("tr", {}, el("td", { class: i.severity === "warning" ? "warn" : "bad", text: fmt(i.severity) }),
      el("td", { text: fmt(i.phase) }), el("td", { text: fmt(i.code) }), el("td", { text: fmt(i.message) }))));
    t.appendChild(b);
    return t;
  }

  function phasesNode(phases) {
    if (!phases || !phases.length) return el("p", { class: "muted", text: "no phase events recorded" });
    const t = el("table", { class: "grid", "data-testid": "phases" },
      el("thead", {}, el("tr", {}, el("th", { text: "try" }), el("th", { text: "phase" }), el("th", { class: "num", text: "seconds" }))));
    const b = el("tbody");
    phases.forEach(([name, secs, tryNo]) => b.appendChild(el("tr", {}, el("td", { text: String(tryNo) }), el("td", { text: name }),
      el("td", { class: "num", text: secs === null ? "running / cut off" : secs.toFixed(3) }))));
    t.appendChild(b);
    return t;
  }

  function kvTable(obj) {
    const t = el("table", { class: "kv" });
    Object.entries(obj || {}).forEach(([k, v]) => t.appendChild(el("tr", {}, el("th", { text: k }), el("td", { text: fmt(v) }))));
    return t;
  }

  function artifactsNode(a) {
    const box = el("div");
    const hasArtifacts = a.artifacts && Object.keys(a.artifacts).length;
    if (hasArtifacts) box.appendChild(pre(a.artifacts));
    (a.manifests || []).forEach((m) => box.appendChild(collapsible("manifest " + (m.file || ""), pre(m), false)));
    if (!hasArtifacts && !(a.manifests || []).length) box.appendChild(el("p", { class: "muted", text: "no artifacts collected" }));
    return box;
  }

  function verifierNode(a) {
    const extra = a.extra || {};
    const keys = Object.keys(extra).filter((k) => k.startsWith("verifier") || k.startsWith("evaluat") || k.startsWith("grader"));
    if (!keys.length) return el("p", { class: "muted", text: "no verifier output recorded" });
    const box = el("div", { "data-testid": "verifier" });
    keys.forEach((k) => box.appendChild(el("div", {}, el("b", { text: k }), contentNode(extra[k]))));
    return box;
  }

  function attemptNode(info, d, a, open) {
    const metrics = Object.entries(a.metrics || {}).map(([k, v]) => k + "=" + fmt(v)).join(", ");
    const box = el("div", { class: "attempt", "data-testid": "attempt-" + a.n });
    const head = "attempt " + a.n + " — " + (a.finished ? fmt(a.status) : a.damaged ? "result.json is damaged (not a JSON object)" : "not finished") + (metrics ? " — " + metrics : "") +
      (a.retries.length ? " — " + a.retries.length + " discarded tr" + (a.retries.length === 1 ? "y" : "ies") : "");
    const inner = el("div");
    inner.appendChild(el("h4", { text: "answer" }));
    inner.appendChild(el("table", { class: "kv" },
      el("tr", {}, el("th", { text: "final answer" }), el("td", { "data-testid": "final-answer", text: fmt(a.final_answer) })),
      el("tr", {}, el("th", { text: "ground truth" }), el("td", { text: fmt(a.ground_truth) })),
      el("tr", {}, el("th", { text: "metrics" }), el("td", { text: metrics || "—" })),
      el("tr", {}, el("th", { text: "usage" }), el("td", { text: Object.keys(a.usage || {}).length ? JSON.stringify(a.usage) : "not recorded" }))));
    inner.appendChild(el("h4", { text: "issues" }));
    inner.appendChild(issuesNode(a.issues));
    inner.appendChild(el("h4", { text: "timings per phase" }));
    inner.appendChild(phasesNode(a.phases));
    inner.appendChild(el("h4", { text: "resolved plan" }));
    const plan = a.plan === null || a.plan === undefined ? null : info.plans[a.plan];
    inner.appendChild(plan ? planTable(info, d.task_id, plan) : el("p", { class: "muted", text: "plan not recorded in run_info.json" }));
    inner.appendChild(el("h4", { text: "trajectory" }));
    inner.appendChild(trajectoryNode(a.trajectory));
    inner.appendChild(el("h4", { text: "verifier output" }));
    inner.appendChild(verifierNode(a));
    inner.appendChild(el("h4", { text: "artifacts" }));
    inner.appendChild(artifactsNode(a));
    if (a.retries.length) {
      inner.appendChild(el("h4", { text: "discarded tries (runtime retries)" }));
      a.retries.forEach((r) => {
        const rb = el("div");
        rb.appendChild(el("p", { text: "retry " + fmt(r.retry) + " after stage " + fmt(r.stage) + " — reason: " + fmt(r.reason) +
          " — waited " + fmt(r.delay_seconds) + " s — status " + fmt(r.status) }));
        rb.appendChild(issuesNode(r.issues));
        rb.appendChild(collapsible("trajectory of the discarded try", trajectoryNode(r.trajectory), false));
        inner.appendChild(collapsible("discarded try " + fmt(r.retry) + ": " + fmt(r.reason), rb, false));
      });
    }
    inner.appendChild(collapsible("telemetry", kvTable(a.telemetry), false));
    inner.appendChild(collapsible("extra", pre(a.extra), false));
    box.appendChild(collapsible(head, inner, open));
    return box;
  }

  function renderTask(run, i) {
    const root = document.getElementById("page-task");
    root.textContent = "";
    const info = INDEX.runs[run];
    const d = details(run)[i];
    if (!d) { root.appendChild(el("p", { text: "no such task" })); return; }
    root.appendChild(el("p", {}, el("a", { href: "#tasks/" + run, text: "← tasks of " + info.name })));
    root.appendChild(el("h2", { "data-testid": "task-title", text: d.task_id }));
    root.appendChild(el("table", { class: "kv" },
      el("tr", {}, el("th", { text: "state" }), el("td", { class: "state-" + d.state, "data-testid": "task-state", text: d.state })),
      el("tr", {}, el("th", { text: "category" }), el("td", { text: d.category })),
      el("tr", {}, el("th", { text: "attempt plan" }), el("td", { text: fmt(d.attempt_plan) })),
      el("tr", {}, el("th", { text: "directory" }), el("td", { text: d.dir }))));
    root.appendChild(el("h3", { text: "instruction" }));
    root.appendChild(d.instruction ? el("pre", { "data-testid": "instruction", text: d.instruction }) : el("p", { class: "muted", text: "not recorded" }));
    root.appendChild(el("h3", { text: "ground truth (publishable reference)" }));
    root.appendChild(pre(d.ground_truth === null || d.ground_truth === undefined ? "—" : d.ground_truth));
    root.appendChild(el("h3", { text: "attempts (" + d.attempts.length + ")" }));
    if (!d.attempts.length) root.appendChild(el("p", { class: "muted", text: "no attempt has finished yet" }));
    d.attempts.forEach((a, k) => root.appendChild(attemptNode(info, d, a, k === d.attempts.length - 1)));
  }

  // ---- live view (served by `acx view`) -----------------------------------------------------
  function live() {
    const cfg = INDEX.live;
    if (!cfg || !cfg.progress_url || !location.protocol.startsWith("http")) return;
    const banner = document.getElementById("live-banner");
    const loadedAt = Date.now();
    if (INDEX.runs.some((r) => r.live)) { banner.hidden = false; banner.textContent = "in progress: following the run"; }
    let last = cfg.stamp;
    async function poll() {
      try {
        const r = await fetch(cfg.progress_url, { cache: "no-store" });
        const p = await r.json();
        banner.hidden = false;
        banner.textContent = p.live ? "in progress: " + fmt(p.finished) + " / " + fmt(p.total) + " tasks" : "status: " + fmt(p.status);
        // Reload when the run changed, but not more often than the server can re-render it.
        if (p.stamp !== last && Date.now() - loadedAt >= (p.min_reload_ms || 0)) { location.reload(); return; }
        if (!p.live) return;
      } catch (e) { banner.hidden = false; banner.textContent = "live view: server unreachable"; }
      setTimeout(poll, cfg.interval_ms || 1500);
    }
    setTimeout(poll, cfg.interval_ms || 1500);
  }

  window.addEventListener("hashchange", route);
  route();
  live();
})();
