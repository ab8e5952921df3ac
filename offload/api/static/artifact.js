// The artifact view's behaviour, over the JSON API: paging through content, queries, pin, the extract log.
// The server renders the first page; this script only ever inserts data with textContent (never innerHTML),
// and every request asks for one bounded page.
"use strict";

(function () {
  const root = document.getElementById("artifact");
  if (!root) return;

  const artifactId = root.dataset.id;
  const namespace = document.body.dataset.namespace || "";
  const apiBase = "/api/artifacts/" + encodeURIComponent(artifactId);
  const PAGE_SIZES = { lines: 200, chars: 20000, bytes: 8192, items: 50 }; // fetch_slice's defaults
  const EXTRACTS_SHOWN = 100;
  const extractsBody = $("extracts-body");
  const queriesOnly = $("extracts-queries");

  // -- small helpers ---------------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "className") node.className = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  async function api(method, path, body) {
    const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (namespace) init.headers["X-Offload-Namespace"] = namespace;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    if (!response.ok) {
      throw new Error((data && data.message) || (response.status + " " + response.statusText));
    }
    return data;
  }

  const fmt = new Intl.NumberFormat("en-US");
  function n(value) { return value === null || value === undefined ? "?" : fmt.format(value); }

  function humanBytes(size) {
    if (size < 1000) return size + " B";
    const units = ["kB", "MB", "GB", "TB"];
    let value = size / 1000, unit = 0;
    while (value >= 999.95 && unit < units.length - 1) { value /= 1000; unit += 1; }
    return value.toFixed(1) + " " + units[unit];
  }

  function ago(iso) {
    const then = new Date(iso);
    const seconds = Math.max(0, (Date.now() - then.getTime()) / 1000);
    if (seconds < 60) return Math.floor(seconds) + " s ago";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    if (seconds < 86400) return Math.floor(seconds / 3600) + " h ago";
    return Math.floor(seconds / 86400) + " d ago";
  }

  function artifactHref(id) {
    return "/artifacts/" + encodeURIComponent(id) + (namespace ? "?namespace=" + encodeURIComponent(namespace) : "");
  }

  function pageHref(request) {
    const params = new URLSearchParams({ unit: request.unit, offset: String(request.offset) });
    if (request.limit !== undefined && request.limit !== null) params.set("limit", String(request.limit));
    if (request.path) params.set("path", request.path);
    if (namespace) params.set("namespace", namespace);
    return "?" + params.toString();
  }

  // -- paging through content ------------------------------------------------------------------

  const body = $("page-body");
  const unitSelect = $("page-unit");
  const links = { start: $("page-start"), prev: $("page-prev"), next: $("page-next"), end: $("page-end") };
  const state = {
    request: JSON.parse(root.dataset.request),
    next: JSON.parse(root.dataset.next || "null"),
    returned: Number(root.dataset.returned || 0),
    back: [], // the requests of the pages Next came from, for Prev (a jump elsewhere forgets them)
  };

  // A request for the same unit, page size and array as this page's, at `offset` (a path names a
  // filtered array).
  function here(offset) {
    const request = { unit: state.request.unit, offset };
    if (state.request.limit !== undefined && state.request.limit !== null) request.limit = state.request.limit;
    if (state.request.path) request.path = state.request.path;
    return request;
  }

  function pageLabel(page) {
    const unit = page.unit;
    if (page.returned === 0 && page.cut) return unit.slice(0, -1) + " " + n(page.offset) + " (cut) of " + n(page.total);
    if (page.returned === 0) return "no " + unit + " at " + n(page.offset) + " of " + n(page.total);
    return unit + " " + n(page.offset) + "–" + n(page.offset + page.returned - 1) + " of " + n(page.total);
  }

  function hexdump(base64, start) {
    const raw = atob(base64);
    const rows = [];
    for (let at = 0; at < raw.length; at += 16) {
      const codes = Array.from(raw.slice(at, at + 16), (c) => c.charCodeAt(0));
      const hex = codes.map((b) => b.toString(16).padStart(2, "0")).join(" ");
      const text = codes.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      rows.push((start + at).toString(16).padStart(8, "0") + "  " + hex.padEnd(47) + "  " + text);
    }
    return rows.join("\n");
  }

  function renderPage(page) {
    body.replaceChildren();
    if (page.encoding === "base64") {
      body.append(el("pre", { className: "mono hex", text: hexdump(page.content, page.offset) }));
    } else if (page.unit === "lines") {
      const grid = el("div", { className: "lines mono" });
      if (page.content) {
        page.content.split("\n").forEach((line, i) => {
          grid.append(el("span", { className: "ln", text: page.offset + i }),
            el("span", { className: "tx", text: line }));
        });
      }
      body.append(grid);
    } else {
      body.append(el("pre", { className: "mono tx", text: page.content }));
    }
    body.scrollTop = 0;
    $("page-label").textContent = pageLabel(page);
    const note = $("page-note");
    note.textContent = page.cut || "";
    note.hidden = !page.cut;
    $("page-error").hidden = true;
    if (unitSelect && [...unitSelect.options].some((o) => o.value === page.unit)) unitSelect.value = page.unit;
  }

  function updateLinks() {
    const request = state.request;
    const size = state.returned || PAGE_SIZES[request.unit] || 100;
    links.start.href = pageHref(here(0));
    links.prev.href = pageHref(state.back.length ? state.back[state.back.length - 1]
      : here(Math.max(request.offset - size, 0)));
    links.end.href = pageHref(here(-size));
    if (state.next) {
      links.next.href = pageHref(state.next);
      links.next.removeAttribute("aria-disabled");
    } else {
      links.next.href = "#";
      links.next.setAttribute("aria-disabled", "true");
    }
    const atStart = state.back.length === 0 && request.offset === 0;
    if (atStart) links.prev.setAttribute("aria-disabled", "true");
    else links.prev.removeAttribute("aria-disabled");
  }

  function fetchPage(request) {
    const params = new URLSearchParams({ unit: request.unit, offset: String(request.offset) });
    if (request.limit !== undefined && request.limit !== null) params.set("limit", String(request.limit));
    if (request.path) params.set("path", request.path);
    return api("GET", apiBase + "/slice?" + params.toString());
  }

  async function show(request, remember, toEnd) {
    body.classList.add("busy");
    try {
      let page = await fetchPage(request);
      // The token budget can cut a page short of the end: for "End", ask again for as much as fit.
      for (let tries = 0; toEnd && page.next && page.returned > 0 && tries < 3; tries += 1) {
        page = await fetchPage({ unit: page.unit, offset: -page.returned });
      }
      if (remember === "next") state.back.push(state.request);
      else if (remember === "jump") state.back = [];
      state.request = { unit: page.unit, offset: page.offset };
      if (request.limit !== undefined && request.limit !== null) state.request.limit = request.limit;
      if (request.path) state.request.path = request.path;
      state.next = page.next;
      state.returned = page.returned;
      renderPage(page);
      if (toEnd) body.scrollTop = body.scrollHeight;
      updateLinks();
      history.replaceState(null, "", pageHref(state.request));
      if (extractsBody) loadExtracts(); // reading a page is logged too
    } catch (error) {
      const box = $("page-error");
      box.textContent = error.message;
      box.hidden = false;
    } finally {
      body.classList.remove("busy");
    }
  }

  function onLink(link, action) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      if (link.getAttribute("aria-disabled") === "true") return;
      action();
    });
  }

  if (body && links.next) {
    // Prev goes back the way Next came; after a jump (Start, End, Go, another unit) to the page before.
    onLink(links.next, () => { if (state.next) show(state.next, "next"); });
    onLink(links.prev, () => {
      if (state.back.length) {
        show(state.back.pop(), false);
      } else {
        const size = state.returned || PAGE_SIZES[state.request.unit] || 100;
        show(here(Math.max(state.request.offset - size, 0)), false);
      }
    });
    onLink(links.start, () => show(here(0), "jump"));
    onLink(links.end, () => {
      const size = state.returned || PAGE_SIZES[state.request.unit] || 100;
      show(here(-size), "jump", true);
    });
    if (unitSelect) unitSelect.addEventListener("change", () => show({ unit: unitSelect.value, offset: 0 }, "jump"));

    const goto = $("page-goto");
    goto.hidden = false;
    goto.addEventListener("submit", (event) => {
      event.preventDefault();
      const offset = parseInt($("page-offset").value, 10);
      if (!Number.isNaN(offset)) show(here(offset), "jump");
    });

    const wrap = $("page-wrap");
    wrap.closest("label").hidden = false;
    wrap.addEventListener("change", () => body.classList.toggle("wrap", wrap.checked));
    updateLinks();
  }

  // -- the reference, pin, the shape tree ------------------------------------------------------

  const copy = $("copy-reference");
  if (copy && navigator.clipboard) {
    copy.hidden = false;
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText($("reference-text").textContent);
        copy.textContent = "Copied";
      } catch (_) {
        copy.textContent = "Copy failed";
      }
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
  }

  const pin = $("pin");
  if (pin) {
    pin.hidden = false;
    pin.addEventListener("click", async () => {
      const pinned = pin.dataset.pinned === "true";
      pin.disabled = true;
      try {
        const meta = await api(pinned ? "DELETE" : "PUT", apiBase + "/pin");
        pin.dataset.pinned = meta.pinned ? "true" : "false";
        pin.textContent = meta.pinned ? "Unpin" : "Pin";
      } catch (error) {
        pin.textContent = "Pin failed";
        pin.title = error.message;
      } finally {
        pin.disabled = false;
      }
    });
  }

  const treeButtons = document.querySelector(".tree-buttons");
  if (treeButtons && document.querySelector(".shape-tree details")) {
    treeButtons.hidden = false;
    const all = () => document.querySelectorAll(".shape-tree details");
    $("shape-open").addEventListener("click", () => all().forEach((d) => { d.open = true; }));
    $("shape-close").addEventListener("click", () => all().forEach((d, i) => { d.open = i === 0; }));
  }

  // -- queries ---------------------------------------------------------------------------------

  const PLACEHOLDERS = {
    jmespath: "e.g. items[?status=='error'] | [:10]",
    sql: "e.g. SELECT * FROM artifact LIMIT 20",
    grep: "a regular expression, e.g. error|warn",
  };
  const form = $("query-form");
  const resultBox = $("query-result");
  const opSelect = $("query-op");
  const exprInput = $("query-expr");

  function syncQueryForm() {
    exprInput.placeholder = PLACEHOLDERS[opSelect.value] || "";
    $("query-context-label").hidden = opSelect.value !== "grep";
  }

  function jsonText(value) { return JSON.stringify(value, null, 2); }

  function resultTable(rows) {
    const columns = [];
    for (const row of rows) for (const key of Object.keys(row)) if (!columns.includes(key)) columns.push(key);
    const missing = (value) => value === null || value === undefined;
    const numeric = columns.map((c) => rows.every((row) => missing(row[c]) || typeof row[c] === "number"));
    const head = el("tr", {}, columns.map((c, i) => el("th", { className: numeric[i] ? "num" : null, text: c })));
    const lines = rows.map((row) => el("tr", {}, columns.map((c) => {
      const value = row[c];
      const text = missing(value) ? "" : typeof value === "object" ? JSON.stringify(value) : String(value);
      return el("td", { className: typeof value === "number" ? "num" : null, text });
    })));
    return el("table", {}, [el("thead", {}, [head]), el("tbody", {}, lines)]);
  }

  function isTable(value) {
    return Array.isArray(value) && value.length > 0 && value.every((row) =>
      row !== null && typeof row === "object" && !Array.isArray(row) &&
      Object.values(row).every((v) => v === null || typeof v !== "object"));
  }

  function renderResult(data, request) {
    resultBox.replaceChildren();
    if (data.artifact_id && data.artifact_id !== artifactId && data.text !== undefined) {
      // too big for the inline budget: stored as a derived artifact, exactly as the model would get it
      const link = el("a", { className: "mono", href: artifactHref(data.artifact_id), text: data.artifact_id });
      resultBox.append(el("div", { className: "derived" }, [
        el("p", {}, [
          el("strong", { text: n(data.count) + " results" }),
          " — too many to show inline, so they were stored as ", link,
          " (" + humanBytes(data.bytes) + "). The model gets this reference:",
        ]),
        el("pre", { className: "mono scroll", text: data.text }),
      ]));
      return;
    }
    const head = el("div", { className: "result-head" }, [
      el("strong", { text: n(data.count) + (data.count === 1 ? " result" : " results") }),
      el("span", { className: "mono", text: data.kind + ": " + data.expression }),
    ]);
    if (data.next_offset !== null && data.next_offset !== undefined) {
      // offsets count results (grep: matching lines, whatever their context), like the model's next call
      const first = request.offset || 0;
      head.append(el("span", { text: "showing " + n(first) + "–" + n(data.next_offset - 1) }));
      const more = el("button", { type: "button", className: "small", text: "Next results →" });
      more.addEventListener("click", () => {
        const following = Object.assign({}, data.next);
        delete following.artifact_id;
        runQuery(following);
      });
      head.append(more);
    }
    let content;
    if (Array.isArray(data.result) && data.result.length === 0) {
      content = el("p", { className: "muted empty-result", text: "Nothing matched." });
    } else if (data.kind === "grep" && Array.isArray(data.result)) {
      // "12: text" is a match, "11- text" a context line (grep's own convention)
      content = el("pre", { className: "mono grep" }, data.result.map((line) =>
        el("span", { className: /^\d+-/.test(line) ? "context" : "match", text: line + "\n" })));
    } else if (isTable(data.result)) {
      content = resultTable(data.result);
    } else {
      content = el("pre", { className: "mono", text: jsonText(data.result) });
    }
    resultBox.append(head, el("div", { className: "result-body" }, [content]));
  }

  async function runQuery(request) {
    const run = $("query-run");
    run.disabled = true;
    try {
      const data = await api("POST", apiBase + "/query", request);
      renderResult(data, request);
      loadExtracts();
    } catch (error) {
      resultBox.replaceChildren(el("p", { className: "error", text: error.message }));
    } finally {
      run.disabled = false;
    }
  }

  if (form) {
    syncQueryForm();
    opSelect.addEventListener("change", syncQueryForm);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const request = { [opSelect.value]: exprInput.value };
      if (opSelect.value === "grep") request.context = parseInt($("query-context").value, 10) || 0;
      runQuery(request);
    });
    for (const hint of document.querySelectorAll(".hint")) {
      hint.addEventListener("click", () => {
        opSelect.value = "jmespath";
        syncQueryForm();
        exprInput.value = hint.dataset.expr;
        runQuery({ jmespath: hint.dataset.expr });
      });
    }
  }

  // -- the extract history ---------------------------------------------------------------------

  let extracts = { rows: [], total: 0 };
  let extractsLoad = 0; // only the latest load renders: a slower, older one must not overwrite it

  function describe(row) {
    if (row.expression) return row.expression;
    const a = row.args || {};
    if (row.op === "slice") {
      return "offset " + n(a.offset) + (a.limit !== null && a.limit !== undefined ? ", limit " + n(a.limit) : "") +
        " (" + (a.unit || "lines") + ")" + (a.path ? " at " + a.path : "");
    }
    return JSON.stringify(a);
  }

  function renderExtracts() {
    const rows = extracts.rows.filter((r) => !queriesOnly.checked || r.op !== "slice");
    extractsBody.replaceChildren(...rows.map((row) => el("tr", {}, [
      el("td", { className: "nowrap", title: row.created_at, text: ago(row.created_at) }),
      el("td", { className: "op", text: row.op }),
      el("td", { className: "expr", text: describe(row) }),
      el("td", { className: "num", title: n(row.result_bytes) + " bytes", text: humanBytes(row.result_bytes || 0) }),
      el("td", {}, [row.result_artifact_id
        ? el("a", { className: "mono", href: artifactHref(row.result_artifact_id), text: row.result_artifact_id })
        : el("span", { className: "muted", text: "inline" })]),
      el("td", { className: "num", text: (row.duration_ms || 0).toFixed(1) + " ms" }),
      el("td", { text: row.session || "" }),
    ])));
    const table = extractsBody.closest("table");
    table.hidden = rows.length === 0;
    const summary = $("extracts-summary");
    if (extracts.total === 0) {
      summary.textContent = "No slice or query of this artifact is logged yet.";
    } else if (extracts.total > EXTRACTS_SHOWN) {
      summary.textContent = n(extracts.total) + " extracts logged; the newest " + EXTRACTS_SHOWN + " are shown.";
    } else {
      summary.textContent = n(extracts.total) + (extracts.total === 1 ? " extract" : " extracts") + " logged, newest first.";
    }
  }

  async function loadExtracts() {
    // The log lists oldest first, a page at a time: read on (since the last one seen) and keep the newest.
    const pageSize = 1000;
    const load = ++extractsLoad;
    const seen = new Set();
    let kept = [], total = 0, since = null;
    try {
      for (let round = 0; round < 50; round += 1) {
        const params = new URLSearchParams({ artifact_id: artifactId, limit: String(pageSize) });
        if (since) params.set("since", since);
        const data = await api("GET", "/api/extracts?" + params.toString());
        const fresh = data.items.filter((row) => !seen.has(row.id));
        fresh.forEach((row) => seen.add(row.id));
        total += fresh.length;
        kept = kept.concat(fresh).slice(-EXTRACTS_SHOWN);
        if (data.items.length < pageSize || fresh.length === 0) break;
        since = data.items[data.items.length - 1].created_at;
      }
      if (load !== extractsLoad) return;
      extracts = { rows: kept.reverse(), total };
      renderExtracts();
    } catch (error) {
      $("extracts-summary").textContent = "Could not load the extract log: " + error.message;
    }
  }

  if (extractsBody) {
    queriesOnly.closest("label").hidden = false;
    queriesOnly.addEventListener("change", renderExtracts);
    loadExtracts();
  }
})();
