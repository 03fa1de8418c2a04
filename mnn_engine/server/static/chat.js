// The chat page: conversations kept in the browser, answers streamed from
// /v1/chat/completions, Markdown by marked + DOMPurify + highlight.js + KaTeX
// (vendored under /static/vendor). Nothing the user typed or the model wrote
// is thrown away: a stopped, interrupted or failed turn stays, marked, with
// what can be done about it.
"use strict";
(() => {
const $ = (id) => document.getElementById(id);
const KEYS = {chats: "mnn-engine-chats", key: "mnn-engine-key", theme: "mnn-engine-theme", defaults: "mnn-engine-defaults"};
const LEGACY = {chat: "mnn-engine-chat", key: "mnn-engine-chat-key"};  // the page before conversations
//: settings fields -> request fields (numbers; empty means the model's default)
const NUMBERS = {max: "max_tokens", temp: "temperature", "top-p": "top_p", "top-k": "top_k", "min-p": "min_p",
                 repeat: "repetition_penalty", seed: "seed"};
const INTEGERS = new Set(["max_tokens", "top_k", "seed"]);
const TEXTS = {system: "system", schema: "schema", tools: "tools"};
const DEFAULTS = {max_tokens: 512, think: true};
const DRAW_MS = 100;          // a streamed answer is redrawn at most this often
const ANNOUNCE_MS = 2500;     // and read out to screen readers at most this often, a sentence at a time
const SAVE_MS = 1000;         // and saved at most this often (a reload keeps what was written)
const TOUCH = matchMedia("(pointer: coarse)");  // a virtual keyboard: Enter is a new line, Send sends

let store = {current: null, conversations: []};
let conv = null;              // the conversation shown
let run = null;               // the answer being written: {conv, reply, controller, stopped, ...}
let editing = null;           // the id of the user message being edited
let confirming = null;        // the id of the conversation whose deletion is being confirmed
let renaming = null;          // the id of the conversation being renamed
let pendingImages = [];       // data URLs attached to the next message
let storageFull = false;
let leaving = false;          // the page is being closed or reloaded: what it saved last stands
const server = {reachable: null, health: null, auth: "unknown", models: [], retry: 1000, retryTimer: null, events: null};

// ---------------------------------------------------------------- small helpers
const uid = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
const escapeHtml = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k.startsWith("aria-") || k === "role" || k === "for") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) if (child) node.append(child);
  return node;
}
const button = (text, cls, onclick, label) => el("button", {type: "button", class: cls || "", text, onclick,
                                                            ...(label ? {"aria-label": label, title: label} : {})});

// ---------------------------------------------------------------- Markdown: marked, then DOMPurify
let markdownReady = false;
let mathSlots = [];  // the TeX of one render, drawn into its slots after sanitising
function mathSlot(source, display) {
  mathSlots.push({source, display});
  return `<span class="math-slot" data-math="${mathSlots.length - 1}"></span>`;
}
function tex(source, display) {  // KaTeX without trust: no \href, \htmlStyle or \includegraphics from a model
  try {
    return katex.renderToString(source, {displayMode: display, throwOnError: false, output: "htmlAndMathml",
                                         trust: false, strict: "ignore", maxSize: 50, maxExpand: 1000});
  } catch (e) { return `<code>${escapeHtml(source)}</code>`; }
}
function setupMarkdown() {
  if (typeof marked === "undefined" || typeof DOMPurify === "undefined") return;  // plain text then
  const math = [];
  if (typeof katex !== "undefined") {
    math.push({
      name: "mathBlock", level: "block",
      start(src) { const i = src.search(/\$\$|\\\[/); return i < 0 ? undefined : i; },
      tokenizer(src) {
        const m = /^\$\$([\s\S]+?)\$\$/.exec(src) || /^\\\[([\s\S]+?)\\\]/.exec(src);
        if (m) return {type: "mathBlock", raw: m[0], text: m[1].trim()};
      },
      renderer(token) { return `<div class="math">${mathSlot(token.text, true)}</div>`; },
    }, {
      name: "mathInline", level: "inline",
      start(src) { const i = src.search(/\$|\\\(/); return i < 0 ? undefined : i; },
      tokenizer(src) {  // $x$ but not "$5 and $6": no space inside the dollars, no digit after
        const m = /^\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)/.exec(src) || /^\\\(([\s\S]+?)\\\)/.exec(src);
        if (m) return {type: "mathInline", raw: m[0], text: m[1]};
      },
      renderer(token) { return mathSlot(token.text, false); },
    });
  }
  marked.use({gfm: true, breaks: true, extensions: math, renderer: {
    code(code, info) {
      const lang = (info || "").trim().split(/\s+/)[0].toLowerCase();
      const known = typeof hljs !== "undefined" && lang && hljs.getLanguage(lang);
      const html = known ? hljs.highlight(lang, code, true).value : escapeHtml(code);
      const attr = lang ? ` data-lang="${escapeHtml(lang.replace(/[^\w+#.-]/g, ""))}"` : "";
      return `<div class="codeblock"><pre><code class="hljs"${attr}>${html}</code></pre></div>`;
    },
  }});
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
  });
  markdownReady = true;
}
//: a model's HTML: no style sheets, no style attributes (no page-covering overlays), no forms or frames
const PURIFY = {ADD_ATTR: ["target"], FORBID_ATTR: ["style"],
                FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe"]};
//: KaTeX's own output: its inline styles and its MathML <semantics> (read by screen readers)
const PURIFY_MATH = {ADD_TAGS: ["semantics", "annotation"], ADD_ATTR: ["encoding"], FORBID_TAGS: ["style"]};
function renderMarkdown(text, into) {
  if (!markdownReady) { into.textContent = text; into.style.whiteSpace = "pre-wrap"; return; }
  mathSlots = [];
  into.innerHTML = DOMPurify.sanitize(marked.parse(text), PURIFY);
  for (const slot of into.querySelectorAll(".math-slot")) {
    const math = mathSlots[+slot.dataset.math];
    if (math) slot.innerHTML = DOMPurify.sanitize(tex(math.source, math.display), PURIFY_MATH);
  }
  for (const block of into.querySelectorAll(".codeblock")) {
    const code = block.querySelector("code");
    if (!code || !code.textContent.trim()) { block.remove(); continue; }  // an empty fence draws nothing
    block.append(button("Copy", "secondary copy-code", () => copyText(code.textContent), "Copy this code"));
  }
}
function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) { navigator.clipboard.writeText(text).catch(() => fallbackCopy(text)); }
  else fallbackCopy(text);
}
function fallbackCopy(text) {  // plain http on a LAN address has no clipboard API
  const area = el("textarea", {value: text});
  document.body.append(area); area.select();
  try { document.execCommand("copy"); } finally { area.remove(); }
}

// ---------------------------------------------------------------- tool calls written as text
//: Qwen-style <tool_call>{"name": ..., "arguments": ...}</tool_call>, when the request had no tools to parse them
function splitToolText(text) {
  const calls = [];
  let rest = text.replace(/<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g, (raw, inner) => {
    try {
      const call = JSON.parse(inner);
      if (call && typeof call.name === "string") {
        calls.push({function: {name: call.name, arguments: JSON.stringify(call.arguments ?? call.parameters ?? {})}});
        return "";
      }
    } catch (e) { /* not a call: shown as written */ }
    return raw;
  });
  const open = rest.indexOf("<tool_call>");
  let partial = null;
  if (open >= 0 && rest.indexOf("</tool_call>", open) < 0) { partial = rest.slice(open + 11); rest = rest.slice(0, open); }
  return {text: rest.trim(), calls, partial};
}
function toolNode(call) {
  let args = call.function.arguments || "";
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* partial: as it is */ }
  return el("div", {class: "tool"}, el("div", {class: "name", text: `tool call: ${call.function.name || "…"}`}),
            el("pre", {text: args}));
}

// ---------------------------------------------------------------- conversations in localStorage
function newConversation(settings) {
  let defaults = {};
  try { defaults = JSON.parse(localStorage.getItem(KEYS.defaults) || "{}"); } catch (e) { defaults = {}; }
  const now = Date.now();
  return {id: uid(), title: "New chat", created: now, updated: now, messages: [],
          settings: {...DEFAULTS, ...defaults, ...(settings || {})}};
}
function cleanMessage(m) {
  if (!m || (m.role !== "user" && m.role !== "assistant") || typeof (m.content ?? "") !== "string") return null;
  const out = {...m, id: typeof m.id === "string" ? m.id : uid(), content: m.content || ""};
  // an imported file is not trusted: images are data URLs of images, tool calls have a name and arguments
  out.images = Array.isArray(m.images) ? m.images.filter((u) => typeof u === "string" && u.startsWith("data:image/")) : [];
  if (!out.images.length) delete out.images;
  out.tool_calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter((c) => c && c.function
    && typeof c.function.name === "string" && typeof (c.function.arguments ?? "") === "string") : [];
  if (!out.tool_calls.length) delete out.tool_calls;
  for (const field of ["reasoning", "stats", "note", "failed"]) if (out[field] != null && typeof out[field] !== "string") delete out[field];
  if (out.state === "streaming") {  // the page went away while it was written
    out.state = "interrupted";
    out.note = "The page was closed or reloaded while this answer was being written.";
  }
  return out;
}
function cleanConversation(c) {
  if (!c || !Array.isArray(c.messages)) return null;
  return {id: typeof c.id === "string" ? c.id : uid(), title: String(c.title || "Chat").slice(0, 200),
          created: +c.created || Date.now(), updated: +c.updated || Date.now(),
          messages: c.messages.map(cleanMessage).filter(Boolean), settings: {...DEFAULTS, ...(c.settings || {})}};
}
function loadStore() {
  try {
    const saved = JSON.parse(localStorage.getItem(KEYS.chats) || "null");
    if (saved && Array.isArray(saved.conversations)) {
      store = {current: saved.current, conversations: saved.conversations.map(cleanConversation).filter(Boolean)};
    }
  } catch (e) { store = {current: null, conversations: []}; }
  let legacy = null;  // the one conversation of the page before this one
  try { legacy = JSON.parse(localStorage.getItem(LEGACY.chat) || "null"); } catch (e) { legacy = null; }
  if (Array.isArray(legacy) && legacy.length) {
    const c = cleanConversation({title: "Earlier chat", messages: legacy.map((m) => ({...m, state: m.done ? "done" : m.state}))});
    if (c && c.messages.length) { titleFrom(c); store.conversations.unshift(c); store.current = c.id; }
  }
  localStorage.removeItem(LEGACY.chat);
  if (localStorage.getItem(LEGACY.key) && !localStorage.getItem(KEYS.key)) localStorage.setItem(KEYS.key, localStorage.getItem(LEGACY.key));
  localStorage.removeItem(LEGACY.key);
  conv = store.conversations.find((c) => c.id === store.current) || store.conversations[0] || null;
  if (!conv) { conv = newConversation(); store.conversations.unshift(conv); }
  store.current = conv.id;
  $("key").value = localStorage.getItem(KEYS.key) || "";
}
function saveStore() {
  try {
    localStorage.setItem(KEYS.chats, JSON.stringify(store));
    if (storageFull) { storageFull = false; showBanner(); }
  } catch (e) {  // full: the conversation stays on the page; say so
    storageFull = true;
    showBanner();
  }
}
let saveTimer = null;
function saveSoon() {
  if (saveTimer) return;
  saveTimer = setTimeout(() => { saveTimer = null; saveStore(); }, SAVE_MS);
}
function titleFrom(c) {
  if (c.title !== "New chat" && c.title !== "Earlier chat") return;
  const first = c.messages.find((m) => m.role === "user" && m.content.trim());
  if (first) c.title = first.content.trim().replace(/\s+/g, " ").slice(0, 48);
}
function touch(c) { c.updated = Date.now(); titleFrom(c); }
function switchTo(c) {
  if (run) return;
  conv = c; store.current = c.id; editing = null;
  saveStore(); fillSettings(); drawAll();
}

// ---------------------------------------------------------------- the conversation list
function drawList() {
  const list = $("conversation-list");
  const sorted = [...store.conversations].sort((a, b) => b.updated - a.updated);
  list.replaceChildren(...sorted.map((c) => {
    const li = el("li", {class: c.id === conv.id ? "current" : ""});
    li.dataset.id = c.id;
    if (renaming === c.id) {
      const input = el("input", {value: c.title, "aria-label": "New name"});
      const done = (keep) => { if (keep && input.value.trim()) c.title = input.value.trim().slice(0, 200); renaming = null; saveStore(); drawList(); };
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") done(true); if (e.key === "Escape") done(false); });
      li.append(input, button("Save", "link", () => done(true)));
      setTimeout(() => input.focus(), 0);
    } else if (confirming === c.id) {
      li.append(el("span", {class: "confirm", text: `Delete “${c.title}”?`}),
                button("Delete", "link delete-yes", () => deleteConversation(c)),
                button("Cancel", "link", () => { confirming = null; drawList(); }));
    } else {
      li.append(el("button", {type: "button", class: "open", text: c.title, title: c.title,
                              "aria-current": c.id === conv.id ? "true" : "false", onclick: () => switchTo(c)}),
                button("Rename", "link rename", () => { renaming = c.id; confirming = null; drawList(); }, `Rename “${c.title}”`),
                button("Delete", "link delete", () => { confirming = c.id; renaming = null; drawList(); }, `Delete “${c.title}”`));
    }
    return li;
  }));
}
function deleteConversation(c) {
  if (run && run.conv === c) return;
  store.conversations = store.conversations.filter((x) => x !== c);
  confirming = null;
  if (conv === c) {
    conv = store.conversations.sort((a, b) => b.updated - a.updated)[0] || newConversation();
    if (!store.conversations.includes(conv)) store.conversations.unshift(conv);
    store.current = conv.id;
    fillSettings(); drawAll();
  }
  saveStore(); drawList();
}
function newChat() {
  if (run) return;
  if (conv && conv.messages.length === 0) { $("prompt").focus(); return; }  // this one is new already
  const c = newConversation();
  store.conversations.unshift(c);
  switchTo(c);
  $("prompt").focus();
}
function exportAll() {
  const data = {format: "mnn-engine-conversations", version: 1, exported: new Date().toISOString(),
                conversations: store.conversations};
  const link = el("a", {href: URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], {type: "application/json"})),
                        download: `mnn-engine-chats-${new Date().toISOString().slice(0, 10)}.json`});
  document.body.append(link); link.click(); link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}
async function importFile(file) {
  let added = 0;
  try {
    const data = JSON.parse(await file.text());
    const items = Array.isArray(data) ? data : data.conversations;
    if (!Array.isArray(items)) throw new Error("no conversations in it");
    const ids = new Set(store.conversations.map((c) => c.id));
    for (const item of items) {
      const c = cleanConversation(item);
      if (!c) continue;
      if (ids.has(c.id)) c.id = uid();
      ids.add(c.id); store.conversations.push(c); added++;
    }
    if (!added) throw new Error("no conversations in it");
    hint(`imported ${added} conversation${added === 1 ? "" : "s"}`);
  } catch (e) {
    hint(`${file.name} is not a conversations file: ${e.message}`, true);
  }
  saveStore(); drawList();
}

// ---------------------------------------------------------------- settings, per conversation
function fillSettings() {
  const s = conv.settings;
  for (const [id, field] of Object.entries(NUMBERS)) $(id).value = s[field] ?? "";
  for (const [id, field] of Object.entries(TEXTS)) $(id).value = s[field] ?? "";
  $("think").checked = s.think !== false;
  if (s.model && [...$("model-picker").options].some((o) => o.value === s.model)) $("model-picker").value = s.model;
}
function readSettings() {
  const s = conv.settings;
  for (const [id, field] of Object.entries(NUMBERS)) {
    const v = $(id).value.trim();
    if (v === "") delete s[field]; else s[field] = INTEGERS.has(field) ? parseInt(v, 10) : parseFloat(v);
  }
  for (const [id, field] of Object.entries(TEXTS)) s[field] = $(id).value;
  s.think = $("think").checked;
  if ($("model-picker").value) s.model = $("model-picker").value;
  localStorage.setItem(KEYS.defaults, JSON.stringify(s));  // a new chat starts from these
  saveStore();
}

// ---------------------------------------------------------------- drawing
function statsLine(m) {
  return m.stats || (m.state === "stopped" ? "stopped" : "");
}
function messageNode(m, index) {
  if (m.role === "user") return userNode(m, index);
  const node = el("div", {class: "msg assistant" + (m.state === "streaming" ? " streaming" : "")});
  node.dataset.id = m.id;
  if (m.reasoning) {
    const details = el("details", {class: "reasoning"}, el("summary", {text: "reasoning"}),
                       el("div", {class: "text", text: m.reasoning}));
    details.open = m.state === "streaming" && !m.content;
    node.append(details);
  }
  const body = el("div", {class: "body"});
  const split = splitToolText(m.content || "");
  renderMarkdown(split.text, body);
  node.append(body);
  for (const call of [...(m.tool_calls || []), ...split.calls]) node.append(toolNode(call));
  if (split.partial !== null) node.append(el("div", {class: "tool"}, el("div", {class: "name", text: "tool call (being written)"}),
                                             el("pre", {text: split.partial})));
  if (m.note) node.append(el("div", {class: "note", text: m.note}));
  if (m.state !== "streaming") {
    const last = index === conv.messages.length - 1;
    node.append(el("div", {class: "meta muted"},
      el("span", {class: "stats", text: statsLine(m)}),
      button("Copy", "copy", () => copyText(m.content || ""), "Copy the answer"),
      last ? button("Regenerate", "regenerate", regenerate) : null,
      button("Delete", "delete-message", () => deleteMessage(m), "Delete this answer")));
  }
  return node;
}
function userNode(m, index) {
  const node = el("div", {class: "msg user" + (editing === m.id ? " editing" : "")});
  node.dataset.id = m.id;
  if (editing === m.id) {
    const area = el("textarea", {value: m.content, "aria-label": "Edit the message"});
    node.append(area, el("div", {class: "actions"},
      button("Save and answer again", "save-edit", () => saveEdit(m, area.value)),
      button("Cancel", "", () => { editing = null; drawAll(); })));
    setTimeout(() => area.focus(), 0);
    return node;
  }
  node.append(el("div", {class: "text", text: m.content}));
  for (const url of m.images || []) node.append(el("img", {src: url, alt: "attached image"}));
  node.append(el("div", {class: "actions"},
    run ? null : button("Edit", "edit", () => { editing = m.id; drawAll(); }, "Edit this message"),
    run ? null : button("Delete", "delete-message", () => deleteMessage(m), "Delete this message")));
  if (!m.failed) return node;
  const failed = el("div", {class: "msg error", role: "note"}, el("span", {text: m.failed}),
                    el("div", {class: "actions"},
                       button("Retry", "retry", () => retry(m)),
                       button("Delete", "delete-failed", () => deleteMessage(m), "Delete the unanswered message")));
  const pair = document.createDocumentFragment();
  pair.append(node, failed);
  return pair;
}
function drawAll() {
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  box.replaceChildren(...conv.messages.map(messageNode));
  if (atBottom || run) box.scrollTop = box.scrollHeight;
  drawList(); drawContext(); updateControls();
}
let drawTimer = null, drawnAt = 0;
function drawStreaming(force) {  // only the answer being written is redrawn
  if (!run || run.conv !== conv) return;
  const wait = DRAW_MS - (performance.now() - drawnAt);
  if (!force && wait > 0) { if (!drawTimer) drawTimer = setTimeout(() => { drawTimer = null; drawStreaming(true); }, wait); return; }
  drawnAt = performance.now();
  const old = $("messages").querySelector(`[data-id="${run.reply.id}"]`);
  const index = conv.messages.indexOf(run.reply);
  if (index < 0) return;
  const fresh = messageNode(run.reply, index);
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 60;
  if (old) old.replaceWith(fresh); else box.append(fresh);
  if (atBottom) box.scrollTop = box.scrollHeight;
}
function drawContext() {  // the picked model's context (a store's server lists each model's)
  const picked = server.models.find((m) => m.id === $("model-picker").value);
  const limit = (picked && picked.context_length) || (server.health && server.health.model && server.health.model.context_length);
  const used = conv.context_used;
  $("context").textContent = limit ? `${used ? used : 0} / ${limit} tokens` : "";
  $("context").title = limit ? `context used by this conversation's last answer: ${used || 0} of ${limit} tokens` : "";
}

// ---------------------------------------------------------------- screen readers: the answer, a sentence at a time
function announce(force) {
  if (!run) return;
  const text = splitToolText(run.reply.content || "").text;
  const now = performance.now();
  if (!force && now - run.announcedAt < ANNOUNCE_MS) return;
  let end = text.length;
  if (!force) {
    const cut = Math.max(...[". ", "! ", "? ", "\n", "。", "！", "？"].map((s) => text.lastIndexOf(s)));
    if (cut < run.announced) return;
    end = cut + 1;
  }
  const piece = text.slice(run.announced, end).trim();
  if (piece || force) {
    $("live").textContent = force ? `${piece} ${run.endNote}`.trim() : piece;
    run.announced = end; run.announcedAt = now;
  }
}

// ---------------------------------------------------------------- the server: reachable, authorised, its model
function headers() {
  const h = {"Content-Type": "application/json"};
  const key = $("key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}
async function refresh() {
  let health;
  try {
    const r = await fetch("/health", {cache: "no-store"});
    health = await r.json();
  } catch (e) { setReachable(false); return; }
  server.health = health;
  const first = server.reachable !== true;
  setReachable(true);
  if (first) await probeAuth();
  showHealth();
}
function setReachable(ok) {
  if (server.reachable === ok) { if (!ok) scheduleRetry(); return; }
  server.reachable = ok;
  if (!ok) scheduleRetry(); else { server.retry = 1000; followEvents(); }
  showBanner(); updateControls();
}
function scheduleRetry() {
  if (server.retryTimer) return;
  server.retryTimer = setTimeout(() => { server.retryTimer = null; refresh(); }, server.retry);
  server.retry = Math.min(server.retry * 2, 5000);
}
let modelsAsked = 0;  // /v1/models requests so far: only the newest one's answer is shown
async function askModels() {  // GET /v1/models (throws if the server is unreachable): its response, its list, and
  // whether it is the newest asked (two events in a row ask twice; the older answer may arrive last)
  const asked = ++modelsAsked;
  const r = await fetch("/v1/models", {headers: headers(), cache: "no-store"});
  let models = [];
  if (r.ok) { try { models = (await r.json()).data || []; } catch (e) { /* shown as none */ } }
  return {r, models, newest: asked === modelsAsked};
}
async function probeAuth() {  // an authenticated request, so a missing or wrong key shows before the first send
  let answer;
  try { answer = await askModels(); } catch (e) { setReachable(false); return; }
  if (answer.r.status === 401) server.auth = $("key").value.trim() ? "wrong" : "needed";
  else {
    server.auth = "ok";
    if (answer.r.ok && answer.newest) server.models = answer.models;
  }
  showAuth(); fillPicker(); showHealth(); showBanner();
}
async function refreshModels() {  // a model loaded, unloaded or pulled: the picker shows it
  if (server.auth !== "ok") return;
  let answer;
  try { answer = await askModels(); } catch (e) { return; }
  if (!answer.r.ok || !answer.newest) return;
  server.models = answer.models;
  fillPicker(); showHealth();
}
function showAuth() {
  const note = $("key-note");
  if (server.auth === "needed") {
    note.textContent = "This server needs an API key (it was started with --api-key).";
    openSettings(true);
  } else if (server.auth === "wrong") {
    note.textContent = "Wrong key: the server refused it.";
    openSettings(true);
  } else note.textContent = $("key").value.trim() ? "Key accepted." : "";
}
function chatModels() {  // what the picker offers: the models that chat (an embedding model does not)
  return server.models.filter((m) => m.kind !== "embedding");
}
function fillPicker() {
  const picker = $("model-picker");
  const front = server.health && server.health.model && server.health.model.name;
  const models = chatModels();
  const ids = models.map((m) => m.id);
  if (front && !ids.includes(front) && !server.models.some((m) => m.id === front)) ids.unshift(front);
  const keep = conv.settings.model && ids.includes(conv.settings.model) ? conv.settings.model
    : ids.includes(front) ? front : ids[0] || "";
  picker.replaceChildren(...ids.map((id) => {
    const m = models.find((x) => x.id === id);
    return el("option", {value: id, text: m && m.loaded === false ? id + " (loads when used)" : id});
  }));
  if (!ids.length) picker.append(el("option", {value: "", text: "no model"}));
  picker.value = keep;
}
function pickedCapabilities(h) {  // the picked model's, else the server's model in front
  const picked = server.models.find((m) => m.id === $("model-picker").value);
  return (picked && picked.capabilities) || (h.model && h.model.capabilities) || [];
}
function showHealth() {
  const h = server.health;
  if (!h) return;
  const caps = pickedCapabilities(h);
  $("think-label").hidden = !caps.includes("thinking");
  $("attach-label").hidden = !caps.includes("vision");
  if (!server.models.length || (h.model.name && ![...$("model-picker").options].some((o) => o.value === h.model.name))) fillPicker();
  drawContext(); updateControls();
}
function showBanner() {
  const banner = $("banner");
  banner.replaceChildren();
  if (server.reachable === false) banner.append("The server is not reachable; retrying…");
  else if (server.auth === "needed") banner.append("This server needs an API key.", button("Enter it in Settings", "secondary", () => openSettings(true)));
  else if (server.auth === "wrong") banner.append("The API key was refused.", button("Fix it in Settings", "secondary", () => openSettings(true)));
  else if (storageFull) banner.append("The browser's storage is full: this conversation is not saved. Export and delete old conversations.");
  banner.hidden = !banner.childNodes.length;
}
function switching(h) { return !!(h && h.models && h.models.switching); }
function ready() {  // a store's server loads the picked model when asked; a one-model server needs it loaded
  const h = server.health;
  return server.reachable === true && server.auth === "ok" && h && h.status === "ok" &&
    (switching(h) ? !!$("model-picker").value : h.model && h.model.state === "loaded");
}
function updateControls() {
  const h = server.health;
  const status = $("status");
  let text = "…", cls = "";
  if (server.reachable === false) { text = "unreachable"; cls = "bad"; }
  else if (server.auth === "needed" || server.auth === "wrong") { text = "needs API key"; cls = "bad"; }
  else if (h) {
    const generating = h.generation && h.generation.state !== "idle";
    const loading = h.models && h.models.loading;
    const none = switching(h) ? !$("model-picker").value : h.model.state !== "loaded";
    text = h.status !== "ok" ? h.status : loading ? "loading " + loading.model : none ? "no model"
      : generating ? "generating" : "ready";
    cls = h.status !== "ok" || none ? "bad" : generating || loading ? "busy" : "ok";
  }
  status.textContent = text; status.className = "pill " + cls;
  $("stop").disabled = !run;
  $("send").disabled = !!run || !ready();
  const why = server.reachable === false ? "The server is not reachable; retrying."
    : server.auth === "needed" ? "Enter the server's API key in Settings."
    : server.auth === "wrong" ? "The API key was refused; fix it in Settings."
    : h && switching(h) && !$("model-picker").value ? "The server has no chat model: pull one (models pull NAME)."
    : h && !switching(h) && h.model && h.model.state !== "loaded" ? "No model is loaded on the server."
    : TOUCH.matches ? "" : "Enter sends, Shift+Enter starts a new line.";
  hint(why);
}
let hintUntil = 0;
function hint(text, important) {
  if (!important && performance.now() < hintUntil) return;
  $("hint").textContent = text;
  if (important) hintUntil = performance.now() + 6000;
}
async function followEvents() {  // pushed state changes; its end is the first sign the server went away
  if (server.events) server.events.abort();
  const abort = new AbortController();
  server.events = abort;
  try {
    const r = await fetch("/events", {headers: headers(), signal: abort.signal});
    if (r.ok) {
      refreshModels();  // subscribed: what changed before (a model loaded while it connected) shows now
      await readEvents(r, (data) => { refresh(); if (/"kind":"(model|pull)"/.test(data)) refreshModels(); });
    }
  } catch (e) { /* aborted, or the server went away */ }
  if (server.events !== abort) return;
  server.events = null;
  await refresh();
  if (server.reachable) setTimeout(() => { if (!server.events && server.reachable) followEvents(); }, 2000);
}
async function readEvents(response, onData) {  // onData(payload) for each "data: ..." event, in order
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
      if (event.startsWith("data: ")) await onData(event.slice(6));
    }
  }
}

// ---------------------------------------------------------------- talking to the model
function contentOf(m) {
  if (!m.images || !m.images.length) return m.content;
  return [{type: "text", text: m.content}, ...m.images.map((url) => ({type: "image_url", image_url: {url}}))];
}
function requestBody(c) {
  const s = c.settings;
  const messages = [];
  if ((s.system || "").trim()) messages.push({role: "system", content: s.system});
  for (const m of c.messages) {
    if (m.role === "user" && !m.failed) messages.push({role: "user", content: contentOf(m)});
    else if (m.role === "assistant" && (m.content || (m.tool_calls && m.tool_calls.length))) {
      const out = {role: "assistant", content: m.content || ""};
      if (m.tool_calls && m.tool_calls.length) out.tool_calls = m.tool_calls;
      messages.push(out);
    }
  }
  const body = {messages, stream: true, stream_options: {include_usage: true}};
  for (const field of Object.values(NUMBERS)) if (s[field] !== undefined && s[field] !== null && !Number.isNaN(s[field])) body[field] = s[field];
  if ($("model-picker").value) body.model = $("model-picker").value;  // what the server serves now
  if (!$("think-label").hidden) body.chat_template_kwargs = {enable_thinking: s.think !== false};
  if ((s.schema || "").trim()) {
    let schema;
    try { schema = JSON.parse(s.schema); } catch (e) { throw new Error(`JSON schema: ${e.message}`); }
    body.response_format = {type: "json_schema", json_schema: {name: "page", schema, strict: true}};
  }
  if ((s.tools || "").trim()) {
    let tools;
    try { tools = JSON.parse(s.tools); } catch (e) { throw new Error(`Tools: ${e.message}`); }
    if (!Array.isArray(tools)) throw new Error("Tools: a JSON list of tool definitions");
    body.tools = tools;
  }
  return body;
}
function lastUser(c) { for (let i = c.messages.length - 1; i >= 0; i--) if (c.messages[i].role === "user") return c.messages[i]; return null; }
async function answer() {
  const c = conv;
  let body;
  const asked = lastUser(c);
  try { body = requestBody(c); } catch (e) {
    if (asked) asked.failed = e.message;
    saveStore(); drawAll(); return;
  }
  const reply = {id: uid(), role: "assistant", content: "", reasoning: "", tool_calls: [], state: "streaming", created: Date.now()};
  c.messages.push(reply);
  run = {conv: c, reply, controller: new AbortController(), stopped: false, started: performance.now(), first: null,
         announced: 0, announcedAt: performance.now(), endNote: "Answer complete."};
  $("live").textContent = "";
  touch(c); saveStore(); drawAll();
  let failure = null;
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify(body),
                                                   signal: run.controller.signal});
    if (!r.ok) {
      const e = await r.json().catch(() => ({error: {message: r.statusText}}));
      const err = e.error || {};
      failure = `${r.status}: ${err.code || ""} ${err.message || ""}`.replace(/\s+/g, " ").trim();
      if (r.status === 401) { server.auth = $("key").value.trim() ? "wrong" : "needed"; showAuth(); showBanner(); }
      return;
    }
    await readEvents(r, (data) => {
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) { failure = `${chunk.error.code || "error"}: ${chunk.error.message}`; return; }
      if (chunk.usage) {
        const secs = (performance.now() - run.started) / 1000;
        const decode = run.first !== null ? chunk.usage.completion_tokens / Math.max(secs - run.first / 1000, 1e-3) : 0;
        reply.stats = `${chunk.usage.completion_tokens} tokens · first token ${run.first ?? "-"} ms · ${decode.toFixed(1)} tok/s`;
        c.context_used = chunk.usage.total_tokens ?? (chunk.usage.prompt_tokens + chunk.usage.completion_tokens);
      }
      for (const choice of chunk.choices || []) {
        const d = choice.delta || {};
        if ((d.content || d.reasoning_content) && run.first === null) run.first = Math.round(performance.now() - run.started);
        if (d.reasoning_content) reply.reasoning += d.reasoning_content;
        if (d.content) reply.content += d.content;
        for (const call of d.tool_calls || []) {  // streamed calls: a call by its index, arguments in pieces
          const at = call.index ?? reply.tool_calls.length;
          const have = reply.tool_calls[at] || (reply.tool_calls[at] = {id: call.id, type: "function", function: {name: "", arguments: ""}});
          if (call.id) have.id = call.id;
          if (call.function && call.function.name) have.function.name += call.function.name;
          if (call.function && call.function.arguments) have.function.arguments += call.function.arguments;
        }
        if (choice.finish_reason) reply.finish = choice.finish_reason;
      }
      drawStreaming(false); announce(false); saveSoon();
    });
  } catch (e) {
    if (e.name === "AbortError" && run.stopped) failure = "stopped";
    else if (e.name !== "AbortError") { failure = "The connection to the server was lost."; refresh(); }
  } finally {
    if (leaving) return;  // the fetch died with the page: the answer was saved as being written, which the next load marks
    const wrote = reply.content || reply.reasoning || reply.tool_calls.length;
    if (failure === "stopped") { reply.state = "stopped"; reply.stats = reply.stats ? `stopped · ${reply.stats}` : "stopped"; }
    else if (failure) { reply.state = "interrupted"; reply.note = `Interrupted: ${failure}`; }
    else {
      reply.state = "done";
      if (reply.finish === "length") reply.note = "Cut short: the answer reached max tokens.";
    }
    if (!wrote) {  // nothing written: no empty answer; the question stays, marked, to retry or delete
      c.messages.splice(c.messages.indexOf(reply), 1);
      if (asked) asked.failed = failure === "stopped" ? "Stopped before any answer." : failure ? failure : "The model answered nothing.";
    }
    if (!reply.tool_calls.length) delete reply.tool_calls;
    if (!reply.reasoning) delete reply.reasoning;
    run.endNote = failure === "stopped" ? "Answer stopped." : failure ? "Answer interrupted." : "Answer complete.";
    announce(true);
    const stopped = run.stopped;
    if (drawTimer) { clearTimeout(drawTimer); drawTimer = null; }
    run = null;
    touch(c); saveStore();
    if (stopped) await waitIdle();  // Send comes back once the server has let go of the generation
    drawAll();
    refresh();
  }
}
async function waitIdle() {
  for (let i = 0; i < 200; i++) {
    try {
      const h = await (await fetch("/health", {cache: "no-store"})).json();
      if (h.generation.state === "idle") { server.health = h; return; }
    } catch (e) { return; }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
function stop() { if (run) { run.stopped = true; run.controller.abort(); } }

// ---------------------------------------------------------------- what the user does
function send() {
  const text = $("prompt").value;
  if ((!text.trim() && !pendingImages.length) || run || !ready()) return;
  const unanswered = conv.messages.length && conv.messages[conv.messages.length - 1].role === "user"
    ? conv.messages[conv.messages.length - 1] : null;
  if (unanswered) {  // never two user turns in a row without the user deciding so
    $("choice-text").textContent = "Your last message got no answer.";
    $("choice").hidden = false;
    $("choice-both").focus();
    return;
  }
  sendNow(text);
}
function sendNow(text) {
  $("choice").hidden = true;
  $("prompt").value = "";
  const message = {id: uid(), role: "user", content: text, created: Date.now()};
  if (pendingImages.length) message.images = pendingImages;
  pendingImages = []; drawAttachments();
  conv.messages.push(message);
  readSettings(); touch(conv); saveStore();
  answer();
}
function regenerate() {
  if (run || !ready()) return;
  while (conv.messages.length && conv.messages[conv.messages.length - 1].role === "assistant") conv.messages.pop();
  const asked = lastUser(conv);
  if (asked) { asked.failed = undefined; answer(); }
}
function retry(m) {
  if (run || !ready()) return;
  m.failed = undefined;
  conv.messages.splice(conv.messages.indexOf(m) + 1);  // it is the last turn: answer it
  answer();
}
function deleteMessage(m) {
  if (run) return;
  conv.messages.splice(conv.messages.indexOf(m), 1);
  touch(conv); saveStore(); drawAll();
}
function saveEdit(m, text) {
  if (run || !text.trim()) return;
  m.content = text; m.failed = undefined; editing = null;
  conv.messages.splice(conv.messages.indexOf(m) + 1);  // the answers after it were to the old text
  touch(conv); saveStore(); drawAll();
  if (ready()) answer();
}
function openSettings(open) {
  const panel = $("settings");
  const show = open ?? panel.hidden;
  panel.hidden = !show;
  $("toggle-settings").setAttribute("aria-expanded", String(show));
  if (show && (server.auth === "needed" || server.auth === "wrong")) $("key").focus();
}

// ---------------------------------------------------------------- images for vision models
async function attach(files) {
  for (const file of files) {
    try { pendingImages.push(await shrink(file)); } catch (e) { hint(`${file.name}: not an image this browser can read`, true); }
  }
  drawAttachments();
}
async function shrink(file, side = 1024) {  // a data URL small enough to keep in the conversation
  const bitmap = await createImageBitmap(file);
  const scale = Math.min(1, side / Math.max(bitmap.width, bitmap.height));
  const canvas = el("canvas", {width: Math.round(bitmap.width * scale), height: Math.round(bitmap.height * scale)});
  canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  return canvas.toDataURL("image/jpeg", 0.85);
}
function drawAttachments() {
  const box = $("attachments");
  box.replaceChildren(...pendingImages.map((url, i) => el("span", {class: "chip"}, el("img", {src: url, alt: `image ${i + 1}`}),
    button("×", "icon", () => { pendingImages.splice(i, 1); drawAttachments(); }, `Remove image ${i + 1}`))));
  box.hidden = !pendingImages.length;
}

// ---------------------------------------------------------------- theme
function applyTheme() {
  const chosen = localStorage.getItem(KEYS.theme) || "auto";
  const dark = chosen === "dark" || (chosen === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  $("hljs-light").disabled = dark; $("hljs-dark").disabled = !dark;
  const label = `Theme: ${chosen === "auto" ? "automatic" : chosen}`;
  $("theme").setAttribute("aria-label", label); $("theme").title = label;
  $("theme").textContent = chosen === "auto" ? "◐" : dark ? "☾" : "☀";
}
function cycleTheme() {
  const order = ["auto", "light", "dark"];
  const now = localStorage.getItem(KEYS.theme) || "auto";
  localStorage.setItem(KEYS.theme, order[(order.indexOf(now) + 1) % order.length]);
  applyTheme();
}

// ---------------------------------------------------------------- wiring
function start() {
  setupMarkdown();
  applyTheme();
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
  loadStore(); fillSettings(); drawAll();
  if (matchMedia("(min-width: 1000px)").matches) { $("conversations").hidden = false; $("toggle-list").setAttribute("aria-expanded", "true"); }
  $("send").addEventListener("click", send);
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("list-new").addEventListener("click", newChat);
  $("export").addEventListener("click", exportAll);
  $("import").addEventListener("change", (e) => { if (e.target.files[0]) importFile(e.target.files[0]); e.target.value = ""; });
  $("attach").addEventListener("change", (e) => { attach([...e.target.files]); e.target.value = ""; });
  $("theme").addEventListener("click", cycleTheme);
  $("toggle-settings").addEventListener("click", () => openSettings());
  $("toggle-list").addEventListener("click", () => {
    const nav = $("conversations");
    nav.hidden = !nav.hidden;
    $("toggle-list").setAttribute("aria-expanded", String(!nav.hidden));
  });
  $("choice-both").addEventListener("click", () => {
    const last = conv.messages[conv.messages.length - 1];
    if (last) last.failed = undefined;
    sendNow($("prompt").value);
  });
  $("choice-drop").addEventListener("click", () => { conv.messages.pop(); sendNow($("prompt").value); });
  $("choice-cancel").addEventListener("click", () => { $("choice").hidden = true; $("prompt").focus(); });
  for (const id of [...Object.keys(NUMBERS), ...Object.keys(TEXTS), "think", "model-picker"]) $(id).addEventListener("change", readSettings);
  $("model-picker").addEventListener("change", showHealth);  // its thinking switch, image button and context
  let keyTimer = null;
  const keyChanged = () => { localStorage.setItem(KEYS.key, $("key").value); probeAuth(); followEvents(); };
  $("key").addEventListener("change", keyChanged);
  $("key").addEventListener("input", () => { clearTimeout(keyTimer); keyTimer = setTimeout(keyChanged, 600); });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && !TOUCH.matches) { e.preventDefault(); send(); }
    if (e.key === "Escape" && run) stop();
  });
  // a reload mid-answer keeps what was written (and only then: another tab may have saved since)
  addEventListener("pagehide", () => { if (run || saveTimer) saveStore(); leaving = true; });
  addEventListener("pageshow", (e) => { if (e.persisted) leaving = false; });  // back from the back-forward cache
  addEventListener("storage", (e) => {  // another tab changed the conversations
    if (e.key === KEYS.chats && !run) { loadStore(); fillSettings(); drawAll(); }
  });
  refresh();
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
