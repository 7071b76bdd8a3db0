// The operator console: plain JavaScript over the REST API, no framework, no build step.
// Every value from the server is put on the page as text (textContent), never as HTML.
"use strict";

const TOKEN_KEY = "orderflow.operator-token";
const TERMINAL = new Set(["shipped", "reservation_failed", "payment_failed", "cancelled", "refunded"]);
const POLL_MS = { queue: 3000, order: 2000, events: 2000 };
const FEED_KEEP = 200;

// -- small helpers -----------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const $ = (id) => document.getElementById(id);

// replaceChildren, leaving out the parts a condition dropped (null would print as "null").
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function show(id, visible) {
  $(id).hidden = !visible;
}

function rub(minor) {
  const sign = minor < 0 ? "-" : "";
  const abs = Math.abs(minor);
  return `${sign}${Math.floor(abs / 100).toLocaleString("en")}.${String(abs % 100).padStart(2, "0")} ₽`;
}

function age(iso) {
  if (!iso) return "";
  let s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

function when(iso) {
  if (!iso) return "—";
  return iso.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function stateBadge(state, waiting) {
  const cls = waiting ? "state waiting" : TERMINAL.has(state) ? "state terminal" : "state";
  return el("span", { class: cls, "data-state": state }, state);
}

function orderLink(id) {
  return el("a", { href: `#/order/${id}`, class: "mono" }, id);
}

// -- the API -----------------------------------------------------------------------------------
class Problem extends Error {
  constructor(status, body) {
    const detail = body && typeof body === "object" ? body.detail : String(body || "");
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.body = body && typeof body === "object" ? body : { detail: this.message };
  }
}

async function api(method, path, { body, key } = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (key) headers["Idempotency-Key"] = key;
  let reply;
  try {
    reply = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (error) {
    throw new Problem(0, { title: "Server unreachable", detail: String(error.message || error) });
  }
  const text = await reply.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { detail: text };
  }
  if (reply.status === 401 && sessionStorage.getItem(TOKEN_KEY)) {
    signOut("The token is no longer accepted; sign in again.");
  }
  if (!reply.ok) throw new Problem(reply.status, parsed);
  return parsed;
}

function problemBox(error) {
  const body = error.body || {};
  const box = el(
    "div",
    { class: "problem", role: "alert", "data-code": body.code || "" },
    el("strong", {}, `${body.title || "Refused"}${error.status ? ` (${error.status})` : ""}`),
    body.detail || error.message,
    body.code ? el("div", { class: "mono" }, `code: ${body.code}`) : null,
  );
  if (Array.isArray(body.errors)) {
    box.append(el("ul", {}, body.errors.map((e) => el("li", {}, `${e.field}: ${e.message}`))));
  }
  if (body.current_state) box.append(el("div", {}, `current state: ${body.current_state}`));
  return box;
}

// -- signing in --------------------------------------------------------------------------------
async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  const error = $("sign-in-error");
  error.hidden = true;
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    await api("GET", "/api/v1/stats/orders");
  } catch (problem) {
    sessionStorage.removeItem(TOKEN_KEY);
    const refused = problem.status === 403
      ? "This console is for operators: a customer's token is refused."
      : problem.status === 401
        ? "Unknown token."
        : problem.message;
    error.textContent = refused;
    error.hidden = false;
    return;
  }
  $("token").value = "";
  if (!location.hash || location.hash === "#/") location.hash = "#/queue";
  route();
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  stopPolling();
  feedStarted = false;
  for (const id of ["view-queue", "view-order", "view-events", "nav", "search"]) show(id, false);
  show("sign-in", true);
  const error = $("sign-in-error");
  error.textContent = message || "";
  error.hidden = !message;
}

// -- polling -----------------------------------------------------------------------------------
let timer = null;
let feedTimer = null;
let generation = 0; // a view's polling loop stops as soon as another view starts its own

function stopPolling() {
  generation += 1;
  feedGeneration += 1;
  clearTimeout(timer);
  clearTimeout(feedTimer);
}

function every(ms, work) {
  generation += 1;
  const mine = generation;
  clearTimeout(timer);
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await work();
    } finally {
      if (mine === generation) timer = setTimeout(tick, ms);
    }
  };
  tick();
}

// -- the queue and the counts ------------------------------------------------------------------
async function refreshQueue() {
  const [page, counts] = await Promise.all([
    api("GET", "/api/v1/orders?needs_attention=true&limit=100"),
    api("GET", "/api/v1/stats/orders"),
  ]);
  const body = $("queue").tBodies[0];
  body.replaceChildren(
    ...page.orders.map((o) =>
      el(
        "tr",
        { "data-order-id": o.order_id },
        el("td", {}, orderLink(o.order_id)),
        el("td", {}, el("span", { class: "reason" }, o.attention_reason)),
        el("td", {}, stateBadge(o.state, true)),
        el("td", { title: when(o.attention_since) }, age(o.attention_since)),
        el("td", {}, rub(o.total_minor)),
        el("td", {}, o.customer_id),
      ),
    ),
  );
  $("queue-count").textContent = String(counts.waiting);
  show("queue-empty", page.orders.length === 0);
  $("queue-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  renderCounts($("counts"), counts.by_state);
  renderCounts($("reasons"), counts.waiting_by_reason);
}

function renderCounts(list, numbers) {
  list.replaceChildren(
    ...Object.entries(numbers).flatMap(([name, n]) => [
      el("dt", {}, name),
      el("dd", { class: n ? "nonzero" : "", "data-count": name }, String(n)),
    ]),
  );
}

// -- one order ---------------------------------------------------------------------------------
let shownOrder = null;
let actionsSignature = "";
let refundKey = null;

async function refreshOrder(orderId) {
  let order;
  let audit;
  try {
    [order, audit] = await Promise.all([
      api("GET", `/api/v1/orders/${orderId}`),
      api("GET", `/api/v1/orders/${orderId}/audit`),
    ]);
  } catch (problem) {
    $("order-problem").replaceChildren(problemBox(problem));
    show("order-problem", true);
    $("order").replaceChildren();
    actionsSignature = "";
    return;
  }
  show("order-problem", false);
  if (shownOrder !== orderId) {
    shownOrder = orderId;
    actionsSignature = "";
    refundKey = null;
    $("order").replaceChildren(
      el("div", { id: "order-head" }),
      el("div", { id: "order-actions" }),
      el("div", { id: "action-result" }),
      el("div", { id: "order-body" }),
    );
  }
  renderOrderHead(order);
  renderActions(order);
  renderOrderBody(order, audit.entries);
}

function renderOrderHead(o) {
  const facts = [
    ["Total", rub(o.total_minor)],
    ["Customer", o.customer_id],
    ["Created", when(o.created_at)],
    ["Updated", when(o.updated_at)],
    ["Payment", `${o.payment.status}${o.payment.reference ? ` · ${o.payment.reference}` : ""}`],
    ["Charge key", o.payment.idempotency_key || "—"],
    ["Reservation", `${o.reservation.status}${o.reservation.expired ? " · expired" : ""}`],
    ["Current step", o.current_step
      ? `${o.current_step.kind} · ${o.current_step.status} · attempt ${o.current_step.attempt}/${o.current_step.max_attempts}`
      : "—"],
  ];
  fill($("order-head"),
    el("div", { class: "panel-head" },
      el("h1", {}, "Order ", el("span", { class: "mono" }, o.order_id)),
      el("span", { id: "order-state" }, stateBadge(o.state, o.needs_attention))),
    o.needs_attention
      ? el("div", { class: "problem", id: "order-attention" },
        el("strong", {}, `Waiting for a person: ${o.attention_reason}`),
        `since ${when(o.attention_since)} (${age(o.attention_since)})`,
        o.current_step && o.current_step.last_error ? ` — last error: ${o.current_step.last_error}` : "")
      : null,
    el("div", { class: "muted" }, o.state_reason || ""),
    el("div", { class: "facts" }, facts.map(([k, v]) => el("div", {}, el("span", {}, k), v))),
  );
}

function renderActions(o) {
  // What the operator may ask now is decided by the service (the order's allowed_actions).
  const actions = o.allowed_actions;
  const signature = `${o.order_id}:${actions.join(",")}`;
  if (signature === actionsSignature || $("confirm").open) return;
  actionsSignature = signature;
  const box = $("order-actions");
  if (!actions.length) {
    box.replaceChildren(el("p", { class: "muted" }, "No action is open to an operator in this state."));
    return;
  }
  const buttons = [];
  if (actions.includes("retry")) {
    buttons.push(el("button", {
      id: "action-retry",
      type: "button",
      onclick: () => act(o.order_id, "retry",
        `Re-arm the ${step(o)} step of this order with a fresh budget of attempts (same idempotency key)?`,
        () => api("POST", `/api/v1/orders/${o.order_id}/retry`)),
    }, "Retry"));
  }
  if (actions.includes("reconcile")) {
    buttons.push(el("button", {
      id: "action-reconcile",
      type: "button",
      onclick: () => act(o.order_id, "reconcile",
        "Ask the payment provider for the status of this charge (same idempotency key)? A confirmed charge ships the order; a failed one releases the stock.",
        () => api("POST", `/api/v1/orders/${o.order_id}/reconcile`)),
    }, "Reconcile payment"));
  }
  if (actions.includes("refund")) {
    refundKey = refundKey || crypto.randomUUID();
    const amount = el("input", { id: "refund-amount", type: "number", min: "1", step: "1",
      placeholder: "all not yet refunded", inputmode: "numeric" });
    const reason = el("input", { id: "refund-reason", type: "text", maxlength: "500",
      placeholder: "why", required: true });
    buttons.push(el("fieldset", {},
      el("div", {}, el("label", { for: "refund-amount" }, "Amount (kopecks)"), amount),
      el("div", {}, el("label", { for: "refund-reason" }, "Reason"), reason),
      el("button", {
        id: "action-refund",
        type: "button",
        class: "danger",
        onclick: () => {
          const body = { reason: reason.value.trim() };
          if (amount.value !== "") body.amount_minor = Number(amount.value);
          const what = body.amount_minor === undefined ? "everything not yet refunded" : rub(body.amount_minor);
          act(o.order_id, "refund", `Refund ${what} of this order? Reason: “${body.reason}”.`,
            async () => {
              const refund = await api("POST", `/api/v1/orders/${o.order_id}/refunds`,
                { body, key: refundKey });
              refundKey = crypto.randomUUID(); // the next refund is another operation
              return refund;
            });
        },
      }, "Refund")));
  }
  box.replaceChildren(el("div", { class: "actions" }, buttons));
}

function step(o) {
  return o.current_step ? o.current_step.kind : "current";
}

function confirmAction(title, text) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

async function act(orderId, name, question, call) {
  const result = $("action-result");
  result.replaceChildren();
  if (!(await confirmAction(`Confirm ${name}`, question))) return;
  try {
    await call();
    result.replaceChildren(el("div", { class: "notice", id: "action-done" },
      `${name}: accepted. The order page follows what happens next.`));
    actionsSignature = ""; // a fresh form for whatever is allowed now
  } catch (problem) {
    // The form keeps what was typed, so it can be corrected and sent again.
    result.replaceChildren(problemBox(problem));
  }
  await refreshOrder(orderId);
}

function renderOrderBody(o, audit) {
  const entries = [];
  for (const h of o.history) {
    entries.push([h.at, "history", `${h.from || "—"} → ${h.to}`, `${h.reason} · ${h.actor}`]);
  }
  for (const s of o.steps) {
    for (const a of s.attempts) {
      entries.push([a.started_at, "attempt", `${s.kind} #${a.attempt} started`, a.worker]);
      if (a.finished_at) {
        entries.push([a.finished_at, "attempt", `${s.kind} #${a.attempt}: ${a.outcome}`, a.error || ""]);
      }
    }
  }
  for (const e of audit) {
    const details = Object.keys(e.details || {}).length ? ` · ${JSON.stringify(e.details)}` : "";
    entries.push([e.at, "audit", `${e.action}: ${e.outcome}`, `${e.actor}${details}`]);
  }
  for (const r of o.refunds) {
    entries.push([r.created_at, "refund", `refund of ${rub(r.amount_minor)} requested`, `${r.reason} · ${r.requested_by}`]);
    if (r.status !== "requested") {
      entries.push([r.updated_at, "refund", `refund ${r.status}`, r.last_error || r.refund_reference || ""]);
    }
  }
  // Within one instant (one transaction): results, then transitions, then what they started.
  const rank = (entry) => ({ history: 1, refund: 2, audit: 3 })[entry[1]] ?? (entry[2].endsWith(" started") ? 4 : 0);
  entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : rank(a) - rank(b)));
  const steps = el("table", { class: "grid", id: "steps" },
    el("thead", {}, el("tr", {}, ["Step", "Status", "Attempt", "Next attempt", "Lease until", "Last error", "Key"].map((t) => el("th", {}, t)))),
    el("tbody", {}, o.steps.map((s) => el("tr", { class: s.status === "failed" || s.status === "blocked" ? "attention" : "" },
      el("td", {}, s.kind),
      el("td", {}, s.status),
      el("td", {}, `${s.attempt}/${s.max_attempts}`),
      el("td", {}, when(s.next_attempt_at)),
      el("td", {}, when(s.lease_expires_at)),
      el("td", {}, s.last_error || ""),
      el("td", { class: "mono" }, s.idempotency_key)))));
  fill($("order-body"),
    el("h2", {}, "Timeline"),
    el("ul", { class: "timeline", id: "timeline" }, entries.map(([at, kind, what, detail]) =>
      el("li", {}, el("span", { class: "mono" }, when(at)), el("span", { class: `kind ${kind}` }, kind),
        el("span", {}, what, detail ? el("span", { class: "muted" }, ` — ${detail}`) : null)))),
    el("h2", {}, "Steps and attempts"),
    steps,
    o.refunds.length ? el("h2", {}, "Refunds") : null,
    o.refunds.length ? el("table", { class: "grid", id: "refunds" },
      el("thead", {}, el("tr", {}, ["Refund", "Amount", "Status", "Reason", "Reference", "Updated"].map((t) => el("th", {}, t)))),
      el("tbody", {}, o.refunds.map((r) => el("tr", {},
        el("td", { class: "mono" }, r.refund_id), el("td", {}, rub(r.amount_minor)), el("td", {}, r.status),
        el("td", {}, r.reason), el("td", {}, r.refund_reference || r.last_error || ""), el("td", {}, when(r.updated_at)))))) : null,
  );
}

// -- the event feed ----------------------------------------------------------------------------
let feedAfter = 0;
let feedStarted = false;
let feedGeneration = 0;
const feed = [];

function startFeed() {
  feedGeneration += 1;
  clearTimeout(feedTimer);
  pollFeed(feedGeneration);
}

async function pollFeed(mine) {
  if (mine !== feedGeneration) return;
  try {
    for (;;) {
      const page = await api("GET", `/api/v1/events?after=${feedAfter}&limit=1000`);
      feed.push(...page.events);
      feed.splice(0, Math.max(0, feed.length - FEED_KEEP));
      feedAfter = page.next_after;
      if (page.events.length < 1000) break;
    }
    $("events-status").textContent = `up to #${feedAfter} · ${new Date().toLocaleTimeString()}`;
    renderFeed();
  } catch (problem) {
    $("events-status").textContent = `feed paused: ${problem.message}`;
  } finally {
    if (mine === feedGeneration && sessionStorage.getItem(TOKEN_KEY)) {
      feedTimer = setTimeout(() => pollFeed(mine), POLL_MS.events);
    }
  }
}

function eventDetails(e) {
  const p = e.payload || {};
  if (e.type === "order.needs_attention") return `${p.reason} (${p.state})`;
  if (p.from !== undefined && p.to) return `${p.from || "—"} → ${p.to}: ${p.reason || ""}`;
  if (p.amount_minor !== undefined) return rub(p.amount_minor);
  return p.status || "";
}

function renderFeed() {
  if ($("view-events").hidden) return;
  $("events").tBodies[0].replaceChildren(
    ...feed.slice().reverse().map((e) =>
      el("tr", { class: e.type === "order.needs_attention" ? "attention" : "" },
        el("td", {}, String(e.seq)),
        el("td", { class: "mono" }, e.type),
        el("td", {}, orderLink(e.order_id)),
        el("td", {}, eventDetails(e)),
        el("td", {}, when(e.created_at)))),
  );
}

// -- routing -----------------------------------------------------------------------------------
function route() {
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    signOut();
    return;
  }
  show("sign-in", false);
  show("nav", true);
  show("search", true);
  if (!feedStarted) {
    feedStarted = true;
    startFeed();
  }
  const [, view, arg] = (location.hash || "#/queue").split("/");
  for (const id of ["view-queue", "view-order", "view-events"]) show(id, false);
  if (view === "order" && arg) {
    show("view-order", true);
    if (shownOrder !== arg) $("order").replaceChildren(el("p", { class: "muted" }, "Loading…"));
    shownOrder = shownOrder === arg ? arg : null;
    every(POLL_MS.order, () => refreshOrder(arg));
  } else if (view === "events") {
    show("view-events", true);
    renderFeed();
    generation += 1;
    clearTimeout(timer);
  } else {
    show("view-queue", true);
    every(POLL_MS.queue, () => refreshQueue().catch((p) => {
      $("queue-updated").textContent = `not updated: ${p.message}`;
    }));
  }
}

function search(event) {
  event.preventDefault();
  const id = $("search-id").value.trim().toLowerCase();
  if (id) location.hash = `#/order/${id}`;
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut("Signed out."));
  $("search").addEventListener("submit", search);
  window.addEventListener("hashchange", route);
  route();
});
