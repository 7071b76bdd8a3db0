// A small renderer of this server's OpenAPI document: operations, parameters, bodies,
// responses and schemas, all as text nodes. Nothing is fetched but /api/v1/openapi.json.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const refName = (ref) => ref.split("/").pop();

function typeText(schema) {
  if (!schema || typeof schema !== "object") return "any";
  if (schema.$ref) return refName(schema.$ref);
  if (schema.const !== undefined) return `const ${JSON.stringify(schema.const)}`;
  const kinds = Array.isArray(schema.type) ? schema.type.join(" | ") : schema.type || "";
  if (schema.type === "array" && schema.items) return `array of ${typeText(schema.items)}`;
  if (schema.oneOf) return schema.oneOf.map(typeText).join(" | ");
  if (schema.allOf) return schema.allOf.map(typeText).join(" & ");
  return kinds || "object";
}

function constraints(schema) {
  const notes = [];
  if (schema.enum) notes.push(`one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}`);
  for (const key of ["minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "format", "default"]) {
    if (schema[key] !== undefined) notes.push(`${key} ${JSON.stringify(schema[key])}`);
  }
  return notes.join(" · ");
}

function schemaView(schema, depth = 0) {
  if (!schema || typeof schema !== "object") return el("span", { class: "type" }, "any");
  if (schema.$ref) {
    const name = refName(schema.$ref);
    return el("a", { href: `#schema-${name}`, class: "type" }, name);
  }
  const box = el("div", { class: "schema" });
  const head = el("div", {}, el("span", { class: "type" }, typeText(schema)));
  const notes = constraints(schema);
  if (notes) head.append(el("span", { class: "muted" }, ` — ${notes}`));
  if (schema.description) head.append(el("div", { class: "muted" }, schema.description));
  box.append(head);
  if (schema.type === "array" && schema.items && !schema.items.$ref && depth < 6) {
    box.append(schemaView(schema.items, depth + 1));
  }
  for (const part of [...(schema.allOf || []), ...(schema.oneOf || [])]) {
    if (!part.$ref && depth < 6) box.append(schemaView(part, depth + 1));
  }
  const required = new Set(schema.required || []);
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    box.append(el("div", { class: "prop" },
      el("code", {}, name), " ",
      required.has(name) ? el("span", { class: "req" }, "required") : el("span", { class: "muted" }, "optional"),
      " ", depth < 6 ? schemaView(prop, depth + 1) : null));
  }
  if (schema.additionalProperties === false) box.append(el("div", { class: "muted" }, "no other fields"));
  return box;
}

function operationView(path, method, op) {
  const body = el("div", { class: "body" });
  if (op.description) body.append(el("p", {}, op.description));
  body.append(el("p", { class: "muted" },
    op.security && op.security.length ? "Needs Authorization: Bearer <token>." : "No authentication."));
  if (op.parameters && op.parameters.length) {
    body.append(el("h3", {}, "Parameters"), el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, ["Name", "In", "Required", "Schema", "Description"].map((t) => el("th", {}, t)))),
      el("tbody", {}, op.parameters.map((p) => el("tr", {},
        el("td", {}, el("code", {}, p.name)), el("td", {}, p.in), el("td", {}, p.required ? "yes" : "no"),
        el("td", {}, typeText(p.schema), el("div", { class: "muted" }, constraints(p.schema || {}))),
        el("td", {}, p.description || ""))))));
  }
  if (op.requestBody) {
    body.append(el("h3", {}, "Request body"));
    for (const [media, content] of Object.entries(op.requestBody.content || {})) {
      body.append(el("div", { class: "muted" }, media), schemaView(content.schema));
    }
  }
  body.append(el("h3", {}, "Responses"));
  for (const [status, response] of Object.entries(op.responses || {})) {
    const item = el("div", { class: "prop" }, el("strong", {}, status), " ", response.description || "");
    for (const [media, content] of Object.entries(response.content || {})) {
      item.append(el("div", { class: "muted" }, media), schemaView(content.schema));
    }
    for (const [name, header] of Object.entries(response.headers || {})) {
      item.append(el("div", { class: "muted" }, `header ${name}: ${header.description || ""}`));
    }
    body.append(item);
  }
  const id = op.operationId || `${method}-${path}`;
  return el("details", { class: "doc-op", id: `op-${id}` },
    el("summary", {}, el("span", { class: `method ${method}` }, method.toUpperCase()),
      el("code", {}, path), el("span", { class: "muted" }, op.summary || "")),
    body);
}

async function main() {
  let doc;
  try {
    const reply = await fetch("/api/v1/openapi.json", { cache: "no-store" });
    doc = await reply.json();
  } catch (error) {
    document.getElementById("doc-info").replaceChildren(
      el("div", { class: "problem" }, `Could not load the document: ${error.message}`));
    return;
  }
  const info = doc.info || {};
  document.getElementById("doc-info").replaceChildren(
    el("h1", {}, `${info.title || "API"} ${info.version || ""}`),
    el("p", {}, info.description || ""),
    el("p", { class: "muted" }, `OpenAPI ${doc.openapi}`));
  const ops = [];
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const [method, op] of Object.entries(item)) ops.push([path, method, op]);
  }
  document.getElementById("doc-toc").replaceChildren(
    el("h2", {}, "Operations"),
    el("ul", { class: "toc" }, ops.map(([path, method, op]) => el("li", {},
      el("a", { href: `#op-${op.operationId}` }, `${method.toUpperCase()} ${path}`)))));
  document.getElementById("doc-paths").replaceChildren(
    ...ops.map(([path, method, op]) => operationView(path, method, op)));
  const hooks = Object.entries(doc.webhooks || {});
  if (hooks.length) {
    document.getElementById("doc-webhooks").replaceChildren(
      el("h2", {}, "Webhooks and events"),
      ...hooks.flatMap(([name, item]) =>
        Object.entries(item).map(([method, op]) => operationView(`webhook ${name}`, method, op))));
  }
  const schemas = Object.entries((doc.components || {}).schemas || {});
  document.getElementById("doc-schemas").replaceChildren(
    el("h2", {}, "Schemas"),
    ...schemas.map(([name, schema]) => el("div", { id: `schema-${name}` }, el("h3", {}, name), schemaView(schema))));
  if (location.hash) {
    const target = document.getElementById(location.hash.slice(1));
    if (target) {
      if (target.tagName === "DETAILS") target.open = true;
      target.scrollIntoView();
    }
  }
}

document.addEventListener("DOMContentLoaded", main);
