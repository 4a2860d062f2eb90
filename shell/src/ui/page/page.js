// jaque's status page: plain JavaScript, no build step, no dependency. It reads the JSON API a page at a time
// (`GET /api/objects?sort=severity&state=…&q=…&selector=…`, `GET /api/summary` for the counts) and follows
// `GET /api/stream` (Server-Sent Events) to apply every change to what it shows, without asking again.
// On every (re)connection of the stream it loads what it shows afresh, so nothing between two connections is
// missed; changes older than what it loaded are recognised by their log position and passed over.
// With `-read-token` the page's own files are open but every read answers 401 until the page sends a token:
// it asks for one (the read token or the write token), keeps it for the tab's life (sessionStorage), and sends
// it with every request, the stream included (read with fetch, as EventSource cannot send a header).
'use strict';

const STATES = ['critical', 'unknown', 'warning', 'pending', 'ok'];
const PROBLEMS = ['critical', 'unknown', 'warning'];
const RANK = { critical: 0, unknown: 1, warning: 2, pending: 3, ok: 4 };
// Objects per request; "show more" asks for the next page by the `Link rel=next` the API gave.
const PAGE = 100;

const app = {
  view: 'objects',
  objectId: null,
  summary: null,
  // `selector` as typed; `picks` its matcher (null: none); `selectorError` the server's reason when it refused it.
  filter: { q: '', states: new Set(), selector: '', picks: null, selectorError: null },
  // The label key the lists are grouped by ('' for none).
  group: '',
  lists: {},
  // The stream: changes that arrive while a load is in flight wait for it.
  loading: 0,
  queued: [],
  pendingFrame: false,
  dirty: new Set(),
  // Events the fence discarded, as seen on this page since it opened (newest first).
  stale: [],
  staleTotal: null,
  // The silences (`GET /api/silences`) and maintenance windows (`GET /api/policy`), on the silences view.
  silences: null,
  windows: null,
  // The bearer token sent with every request ('' for none); a read 401 and a write 401 both ask for it.
  token: sessionStorage.getItem('jaque-token') || '',
  // The reader said no to the read token's dialog: reads are not asked for again until a reload.
  readRefused: false,
  es: null,
  retryMs: 1000,
  // What tests and the benchmark read: events applied, loads begun, loads drawn, loads in flight; when the last
  // load began and was drawn, and when the first was drawn (`performance.now()`: ms since navigation start).
  stats: { events: 0, loads: 0, renders: 0, loading: 0, loadStarted: 0, loadRendered: 0, firstRendered: 0, connected: false },
};
window.jaqueStats = app.stats;

// ---- small helpers --------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const $ = (sel, root) => (root || document).querySelector(sel);

function fmtDuration(ms) {
  let s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

function fmtTime(ms) {
  return new Date(ms).toLocaleString();
}

function badge(state) {
  return h('span', { class: `badge ${state}` }, state);
}

// The state an object shows: its hard state, or while its latest results differ from it, the soft state with its
// attempt ("critical 2/3", dashed) and the hard state under it.
function stateBadge(o) {
  const s = o.soft;
  if (!s) return badge(o.state);
  return [
    h('span', { class: `badge soft ${s.state}`, title: `soft state: attempt ${s.attempt} of ${s.of} before it is hard` },
      `${s.state} ${s.attempt}/${s.of}`),
    h('span', { class: 'soft-note' }, `soft; hard state ${o.state}`),
  ];
}

// An object's labels as chips (null when it has none).
function labelChips(labels) {
  const entries = Object.entries(labels || {});
  if (entries.length === 0) return null;
  return h('ul', { class: 'labels', 'aria-label': 'Labels' },
    entries.map(([k, v]) => h('li', { class: 'chip' }, v === '' ? k : `${k}=${v}`)));
}

// ---- label selectors ---------------------------------------------------------------------------------------

// A matcher of the API's label selector grammar (`core/src/labels.rs`: `key=v`, `key==v`, `key!=v`,
// `key in (a,b)`, `key notin (a,b)`, `key`, `!key`, comma-separated), so changes from the stream are applied to
// lists and counts filtered by one. The server reads the selector first (a load with it answers 400 when it
// does not parse), so this only sees selectors that parse; null for anything else.
function selectorMatcher(text) {
  const toks = text.match(/==|!=|[=!,()<>]|[^\s=!,()<>]+/g) || [];
  const get = (l, k) => (Object.prototype.hasOwnProperty.call(l, k) ? l[k] : undefined);
  const isWord = (t) => t !== undefined && !/^[=!,()<>]/.test(t);
  const reqs = [];
  let i = 0;
  while (i < toks.length) {
    if (toks[i] === '!') {
      const k = toks[i + 1];
      if (!isWord(k)) return null;
      i += 2;
      reqs.push((l) => get(l, k) === undefined);
    } else {
      const k = toks[i];
      if (!isWord(k)) return null;
      i += 1;
      const op = toks[i];
      if (op === '=' || op === '==' || op === '!=') {
        i += 1;
        let v = '';
        if (isWord(toks[i])) { v = toks[i]; i += 1; }
        reqs.push(op === '!=' ? (l) => get(l, k) !== v : (l) => get(l, k) === v);
      } else if ((op === 'in' || op === 'notin') && toks[i + 1] === '(') {
        i += 2;
        const values = [];
        while (i < toks.length && toks[i] !== ')') {
          if (toks[i] !== ',') values.push(toks[i]);
          i += 1;
        }
        i += 1;
        reqs.push(op === 'in' ? (l) => values.includes(get(l, k)) : (l) => !values.includes(get(l, k)));
      } else {
        reqs.push((l) => get(l, k) !== undefined);
      }
    }
    if (toks[i] === ',') i += 1;
    else if (i < toks.length) return null;
  }
  return (labels) => reqs.every((r) => r(labels || {}));
}

// Whether the selector in force picks an object with `labels` (any object when there is none; none while the
// server refuses it).
function picked(labels) {
  if (app.filter.selectorError) return false;
  return !app.filter.picks || app.filter.picks(labels || {});
}

// A load refused because the selector does not parse: the server's reason.
class SelectorRefused extends Error {}

function nextLink(resp) {
  const link = resp.headers.get('link');
  const m = link && link.match(/<([^>]+)>;\s*rel="next"/);
  return m ? m[1] : null;
}

function authHeaders(accept) {
  const headers = { accept };
  if (app.token) headers.authorization = `Bearer ${app.token}`;
  return headers;
}

// A read refused for want of the read token, after the reader declined to give it (the notice says so).
class Unauthorized extends Error {}

const READ_REFUSED = '401 Unauthorized: this ui shows its state only with its read token (-read-token) or its write token; reload the page to enter it.';

// A read answered 401 with `sent` as the token: asks for the token once for every read waiting on it. Resolves
// to true when there is a new token to try (entered now, or by another read since this one was sent).
async function askReadToken(sent) {
  if (app.token !== sent) return true;
  if (app.readRefused) return false;
  if (!app.askingRead) {
    app.askingRead = askToken({
      title: 'Read token',
      label: ['The ui\'s read token (', h('code', null, '-read-token'), ') or its write token'],
      why: 'This ui shows its state only to those who hold its read token.',
      error: sent ? '401 Unauthorized: the token was refused.' : '',
    }).then((token) => {
      app.askingRead = null;
      if (token === null) {
        app.readRefused = true;
        notice(READ_REFUSED, true);
        return false;
      }
      useToken(token);
      return true;
    });
  }
  return app.askingRead;
}

function useToken(token) {
  app.token = token;
  sessionStorage.setItem('jaque-token', token);
}

async function getJSON(url) {
  for (;;) {
    const sent = app.token;
    const r = await fetch(url, { headers: authHeaders('application/json') });
    if (r.status === 401) {
      if (await askReadToken(sent)) continue;
      throw new Unauthorized(READ_REFUSED);
    }
    let body = null;
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    return { status: r.status, body, resp: r };
  }
}

function notice(text, isError) {
  const n = $('#notice');
  n.textContent = text;
  n.className = isError ? 'notice error' : 'notice';
  n.setAttribute('role', isError ? 'alert' : 'status');
  n.hidden = false;
}

// ---- the order of the lists: the API's sort=severity ------------------------------------------------------

function keyOf(o) { return [RANK[o.state], o.state_since_ms, o.id]; }

function cmpKey(a, b) {
  for (let i = 0; i < 3; i++) {
    if (a[i] < b[i]) return -1;
    if (a[i] > b[i]) return 1;
  }
  return 0;
}

// ---- the two lists ----------------------------------------------------------------------------------------

function makeList(name, states) {
  const section = $(`#list-${name}`);
  const list = {
    name, base: states, section,
    tbody: $('tbody', section), table: $('table', section), empty: $('.empty', section), more: $('.more', section),
    items: [], next: null, states: [],
  };
  list.more.addEventListener('click', () => loadMore(list));
  return list;
}

// The states a list shows under the filter (none: the list is filtered out).
function statesOf(list) {
  const f = app.filter.states;
  return list.base.filter((s) => f.size === 0 || f.has(s));
}

function admits(list, o) {
  return list.states.includes(o.state) && o.id.toLowerCase().includes(app.filter.q.toLowerCase())
    && picked(o.definition.labels);
}

function listUrl(list) {
  const p = new URLSearchParams({ limit: String(PAGE), sort: 'severity', state: list.states.join(',') });
  if (app.filter.q) p.set('q', app.filter.q);
  if (app.filter.selector) p.set('selector', app.filter.selector);
  return `/api/objects?${p}`;
}

function summaryUrl() {
  return app.filter.selector ? `/api/summary?${new URLSearchParams({ selector: app.filter.selector })}` : '/api/summary';
}

// A 400 for the selector: the server's reason, as an error the load shows by the selector's box.
function refusedSelector(r) {
  if (r.status === 400 && app.filter.selector) {
    return new SelectorRefused((r.body && r.body.reason) || 'the label selector was refused');
  }
  return null;
}

async function loadList(list) {
  list.states = statesOf(list);
  if (list.states.length === 0) {
    list.items = [];
    list.next = null;
    return;
  }
  const r = await getJSON(listUrl(list));
  const refused = refusedSelector(r);
  if (refused) throw refused;
  if (r.status !== 200) throw new Error(`${listUrl(list)}: ${r.status} ${JSON.stringify(r.body)}`);
  list.items = r.body;
  list.next = nextLink(r.resp);
}

async function loadMore(list) {
  if (!list.next) return;
  list.more.disabled = true;
  try {
    const r = await getJSON(list.next);
    if (r.status !== 200) throw new Error(`${r.status} ${JSON.stringify(r.body)}`);
    const have = new Set(list.items.map((o) => o.id));
    list.items.push(...r.body.filter((o) => !have.has(o.id)));
    list.next = nextLink(r.resp);
    renderList(list);
  } catch (e) {
    notice(`Could not load more: ${e.message}`, true);
  } finally {
    list.more.disabled = false;
  }
}

// Applies a change to a list: out if it was there, in at its place if it belongs to what the list has loaded
// (before its last row, or anywhere when the list has no more pages).
function applyToList(list, seq, id, o) {
  const at = list.items.findIndex((x) => x.id === id);
  if (at >= 0) {
    if (list.items[at].last_seq >= seq) return false;
    list.items.splice(at, 1);
  }
  let changed = at >= 0;
  if (o && admits(list, o)) {
    const key = keyOf(o);
    const last = list.items[list.items.length - 1];
    if (!list.next || (last && cmpKey(key, keyOf(last)) < 0)) {
      let i = list.items.findIndex((x) => cmpKey(key, keyOf(x)) < 0);
      if (i < 0) i = list.items.length;
      list.items.splice(i, 0, o);
      changed = true;
    }
  }
  return changed;
}

function actionButtons(o, compact) {
  const b = (label, what, action, cls) =>
    h('button', { type: 'button', class: cls, 'aria-label': compact ? `${label} ${o.id}` : null,
      onclick: (ev) => act(ev.currentTarget, o.id, what, action) }, label);
  const out = [];
  if (PROBLEMS.includes(o.state) && !o.acknowledged) out.push(b('Acknowledge', 'acknowledge', 'ack', 'ack'));
  out.push(o.paused ? b('Resume', 'resume', 'resume', 'resume') : b('Pause', 'pause', 'pause', 'pause'));
  out.push(b('Check now', 'check now', 'check', 'check'));
  out.push(b('Delete', 'delete', 'delete', 'delete danger'));
  return out;
}

function marks(o) {
  return [
    o.acknowledged ? h('span', { class: 'mark ack', title: 'acknowledged' }, 'acknowledged') : null,
    o.paused ? h('span', { class: 'mark paused', title: 'checks paused' }, 'paused') : null,
    o.flapping ? h('span', { class: 'mark flapping', title: 'its state changes often: its transitions are not notified' }, 'flapping') : null,
    o.held ? h('span', { class: `mark held ${o.held.reason}`, title: HELD[o.held.reason](o.held.by) }, HELD_MARK[o.held.reason]) : null,
  ];
}

// What holds an object's problems back from being notified (`held` of the API's object).
const HELD_MARK = { silenced: 'silenced', maintenance_window: 'in maintenance', parent_down: 'parent down' };
const HELD = {
  silenced: (by) => `silence ${by.join(', ')}: its problems are not notified`,
  maintenance_window: (by) => `maintenance window ${by.join(', ')} is open: its problems are not notified`,
  parent_down: (by) => `parent ${by.join(', ')} is in a problem: its problems are not notified`,
};

// The latest check's output: the soft state's while there is one, else the last transition's.
function lastOutput(o) {
  if (o.soft) return o.soft.output;
  return o.last_transition ? o.last_transition.output : '—';
}

const COLUMNS = 7;

function row(o, flash) {
  const s = o.soft;
  return h('tr', { 'data-id': o.id, 'data-state': o.state, 'data-soft': s ? `${s.state} ${s.attempt}/${s.of}` : null,
    class: flash ? 'flash' : null },
    h('td', { class: 'state' }, stateBadge(o)),
    h('td', { class: 'id' }, h('a', { href: `#/object/${encodeURIComponent(o.id)}`, class: 'mono' }, o.id),
      labelChips(o.definition.labels)),
    h('td', { class: 'for', 'data-since': o.state_since_ms }, fmtDuration(Date.now() - o.state_since_ms)),
    h('td', { class: 'output' }, lastOutput(o)),
    h('td', { class: 'owner mono' }, o.owner || 'none'),
    h('td', { class: 'marks' }, marks(o)),
    h('td', { class: 'actions' }, actionButtons(o, true)));
}

function emptyText(list) {
  if (list.states.length === 0) return 'Filtered out by the state filter.';
  if (app.filter.selectorError) return 'Nothing to show: the label selector is not valid (see above).';
  if (app.filter.selector) return `No object here that the label selector “${app.filter.selector}” picks${app.filter.q ? ` and whose id contains “${app.filter.q}”` : ''}.`;
  return app.filter.q ? `No object here whose id contains “${app.filter.q}”.` : 'None.';
}

// The items in groups by the value of label `key`: [value or null, items], by value, those without it last.
function groupsOf(items, key) {
  const groups = new Map();
  for (const o of items) {
    const labels = o.definition.labels || {};
    const v = Object.prototype.hasOwnProperty.call(labels, key) ? labels[key] : null;
    if (!groups.has(v)) groups.set(v, []);
    groups.get(v).push(o);
  }
  return [...groups.entries()].sort(([a], [b]) => (a === null) - (b === null) || (a < b ? -1 : a > b ? 1 : 0));
}

function renderList(list, flashed) {
  const hidden = list.states.length === 0;
  list.table.hidden = hidden || list.items.length === 0;
  list.empty.hidden = !(hidden || list.items.length === 0);
  list.empty.textContent = emptyText(list);
  // Keep focus where it was when a row is redrawn under it.
  const focused = document.activeElement;
  const focusKey = focused && focused.closest && focused.closest('tr[data-id]')
    ? [focused.closest('tr[data-id]').dataset.id, focused.className] : null;
  const rows = (items) => items.map((o) => row(o, flashed && flashed.has(o.id)));
  const key = app.group;
  // Grouped: a body per value with a header row naming it and counting its rows (those loaded, when more pages
  // follow).
  const bodies = key
    ? groupsOf(list.items, key).map(([v, items]) => h('tbody', { class: 'group', 'data-group': v === null ? '' : v },
      h('tr', { class: 'group-head' }, h('th', { scope: 'rowgroup', colspan: String(COLUMNS) },
        v === null ? `no ${key}` : `${key}=${v}`, ' ',
        h('span', { class: 'group-count' }, `(${items.length}${list.next ? ' shown' : ''})`))),
      rows(items)))
    : [h('tbody', {}, rows(list.items))];
  for (const b of list.table.querySelectorAll('tbody')) b.remove();
  list.table.append(...bodies);
  if (focusKey) {
    const tr = [...list.table.querySelectorAll('tr[data-id]')].find((r) => r.dataset.id === focusKey[0]);
    const el = tr && [...tr.querySelectorAll('a, button')].find((e) => e.className === focusKey[1]);
    if (el) el.focus();
  }
  list.more.hidden = !list.next;
}

// The label keys of the objects loaded, as the choices of the group select (the chosen one kept).
function renderGroupKeys() {
  const keys = new Set();
  for (const list of [app.lists.problems, app.lists.rest]) {
    for (const o of list.items) for (const k of Object.keys(o.definition.labels || {})) keys.add(k);
  }
  if (app.group) keys.add(app.group);
  const sorted = [...keys].sort();
  const select = $('#group');
  const have = [...select.options].slice(1).map((o) => o.value);
  if (have.length === sorted.length && have.every((k, i) => k === sorted[i])) return;
  select.replaceChildren(h('option', { value: '' }, 'no grouping'),
    ...sorted.map((k) => h('option', { value: k, selected: k === app.group }, k)));
  select.value = app.group;
}

function renderSelectorError() {
  const input = $('#selector');
  const err = app.filter.selectorError;
  $('#selector-error').textContent = err || '';
  input.toggleAttribute('aria-invalid', !!err);
  if (err) input.setAttribute('aria-invalid', 'true');
}

// ---- counts ----------------------------------------------------------------------------------------------

function renderCounts() {
  const s = app.summary;
  const set = (id, v) => { $(`#count-${id}`).textContent = s ? String(v) : '–'; };
  set('all', s && s.objects);
  for (const st of STATES) set(st, s && s.states[st]);
  set('acknowledged', s && s.acknowledged);
  set('paused', s && s.paused);
  $('#count-all-label').textContent = app.filter.selector && !app.filter.selectorError
    ? 'objects the label selector picks' : 'objects';
  $('#problems-title').textContent = s
    ? `Problems (${PROBLEMS.reduce((n, st) => n + s.states[st], 0)})` : 'Problems';
  $('#rest-title').textContent = s ? `Everything else (${s.states.pending + s.states.ok})` : 'Everything else';
}

// Moves the counts by one change; with a label selector, only the sides it picks count (a put may change the
// labels: `was` has them as they were).
function moveCounts(was, o) {
  const s = app.summary;
  if (was && !picked(was.labels)) was = null;
  if (o && !picked(o.definition.labels)) o = null;
  if (was) {
    s.objects -= 1; s.states[was.state] -= 1;
    s.acknowledged -= was.acknowledged ? 1 : 0; s.paused -= was.paused ? 1 : 0;
  }
  if (o) {
    s.objects += 1; s.states[o.state] += 1;
    s.acknowledged += o.acknowledged ? 1 : 0; s.paused += o.paused ? 1 : 0;
  }
}

// ---- loading and the stream ---------------------------------------------------------------------------------

// Loads what the current view shows; changes that arrive meanwhile are applied after it.
async function load() {
  app.loading += 1;
  app.stats.loading = app.loading;
  app.stats.loads += 1;
  app.stats.loadStarted = performance.now();
  try {
    const summary = getJSON(summaryUrl());
    if (app.view === 'objects') {
      await Promise.all([loadList(app.lists.problems), loadList(app.lists.rest)]);
    } else if (app.view === 'object') {
      await loadObject();
    } else if (app.view === 'cluster') {
      await loadCluster();
    } else if (app.view === 'silences') {
      await loadSilences();
    }
    const s = await summary;
    const refused = refusedSelector(s);
    if (refused) throw refused;
    if (s.status === 200) app.summary = s.body;
    app.filter.selectorError = null;
  } catch (e) {
    if (e instanceof SelectorRefused) {
      app.filter.selectorError = e.message;
      app.summary = null;
      for (const list of [app.lists.problems, app.lists.rest]) { list.items = []; list.next = null; }
    } else if (!(e instanceof Unauthorized)) {
      notice(`Could not load: ${e.message}`, true);
    }
  } finally {
    app.loading -= 1;
    app.stats.loading = app.loading;
  }
  if (app.loading === 0) {
    const queued = app.queued;
    app.queued = [];
    render();
    for (const c of queued) applyChange(c);
    flush();
    app.stats.loadRendered = performance.now();
    if (app.stats.renders === 0) app.stats.firstRendered = app.stats.loadRendered;
    app.stats.renders += 1;
    document.body.dataset.loaded = String(app.stats.loads);
  }
}

function render() {
  renderCounts();
  renderSelectorError();
  if (app.view === 'objects') {
    renderGroupKeys();
    renderList(app.lists.problems);
    renderList(app.lists.rest);
  } else if (app.view === 'object') {
    renderObject();
  } else if (app.view === 'cluster') {
    renderCluster();
  } else if (app.view === 'silences') {
    renderSilences();
  }
}

function applyChange(c) {
  if (app.loading > 0) { app.queued.push(c); return; }
  if (app.summary && c.seq > app.summary.log_position) {
    moveCounts(c.was, c.object);
    app.summary.log_position = c.seq;
    app.dirty.add('counts');
  }
  if (app.view === 'objects') {
    for (const list of [app.lists.problems, app.lists.rest]) {
      if (applyToList(list, c.seq, c.id, c.object)) {
        app.dirty.add(list.name);
        (list.flash = list.flash || new Set()).add(c.id);
      }
    }
  } else if (app.view === 'object' && c.id === app.objectId) {
    const had = app.object;
    if (!had || (had.last_seq || 0) < c.seq) {
      app.object = c.object;
      app.objectGone = !c.object;
      const t = c.object && c.object.last_transition;
      if (t && (!had || !had.last_transition || had.last_transition.seq !== t.seq)) {
        // A new transition: the store has it (or soon will); the page asks again.
        app.dirty.add('history');
      }
      app.dirty.add('object');
    }
  }
  app.stats.events += 1;
  schedule();
}

// Redraws what changed, at most once a frame however many changes came.
function schedule() {
  if (app.pendingFrame) return;
  app.pendingFrame = true;
  requestAnimationFrame(flush);
}

function flush() {
  app.pendingFrame = false;
  const d = app.dirty;
  if (d.size === 0) return;
  app.dirty = new Set();
  if (d.has('counts')) renderCounts();
  if ((d.has('problems') || d.has('rest')) && app.view === 'objects') renderGroupKeys();
  for (const name of ['problems', 'rest']) {
    if (d.has(name) && app.view === 'objects') {
      const list = app.lists[name];
      renderList(list, list.flash);
      list.flash = null;
    }
  }
  if (d.has('object') && app.view === 'object') renderObject();
  if (d.has('history') && app.view === 'object') refreshHistory();
  if (d.has('cluster') && app.view === 'cluster') load();
}

function setConn(state, text) {
  const c = $('#conn');
  c.dataset.state = state;
  c.textContent = text;
  app.stats.connected = state === 'live';
}

// What each event of the stream does.
const ON_EVENT = {
  hello: () => {
    app.retryMs = 1000;
    setConn('live', 'live');
    load();
  },
  change: (data) => applyChange(JSON.parse(data)),
  reload: () => load(),
  epoch: (data) => {
    const e = JSON.parse(data);
    if (app.summary) app.summary.epoch = e.epoch;
    // Owners may have moved: what is shown is loaded again.
    debounceLoad();
  },
  members: () => {
    if (app.view === 'cluster') debounceLoad();
  },
  // The notification policy changed: silences and windows, and the marks they put on objects.
  policy: () => debounceLoad(),
  stale: (data) => {
    const s = JSON.parse(data);
    app.stale.unshift(s);
    app.stale.length = Math.min(app.stale.length, 50);
    app.staleTotal = s.stale_events;
    if (app.view === 'cluster') renderCluster();
  },
};

// Reads Server-Sent Events from a response body until it ends, calling `on(event, data)` for each: fields
// `event:` and `data:` (several data lines joined by newlines), comments (the keep-alives) passed over.
async function readEvents(body, on) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? '' : line.slice(colon + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'event') event = v;
        else if (field === 'data') data.push(v);
      }
      if (data.length) on(event, data.join('\n'));
    }
  }
}

// Follows the stream (`GET /api/stream`, with the token). When it ends or cannot be had (the process stopping,
// a proxy's error) the page tries again, waiting longer each time up to 30 s; a 401 asks for the read token.
async function connect() {
  const ctl = new AbortController();
  app.es = ctl;
  const sent = app.token;
  let r = null;
  try {
    r = await fetch('/api/stream', { headers: authHeaders('text/event-stream'), cache: 'no-store', signal: ctl.signal });
  } catch (_) { /* no answer */ }
  if (r && r.status === 401) {
    if (await askReadToken(sent)) {
      if (app.es === ctl) connect();
    } else {
      setConn('disconnected', 'disconnected: no read token');
    }
    return;
  }
  if (r && r.ok && r.body) {
    try {
      await readEvents(r.body, (event, data) => {
        const on = ON_EVENT[event];
        if (on && app.es === ctl) on(data);
      });
    } catch (_) { /* the connection dropped */ }
  }
  if (app.es !== ctl) return;
  setConn('disconnected', `disconnected: retrying in ${Math.round(app.retryMs / 1000)} s`);
  setTimeout(() => { if (app.es === ctl) connect(); }, app.retryMs);
  app.retryMs = Math.min(app.retryMs * 2, 30000);
}

let loadTimer = null;
function debounceLoad() {
  clearTimeout(loadTimer);
  loadTimer = setTimeout(load, 300);
}

// ---- writes ---------------------------------------------------------------------------------------------------

// Asks for a token in the one dialog; a second ask waits for the first to close. Resolves to the token, or null.
let dialogQueue = Promise.resolve();
function askToken({ title, label, why, error }) {
  const asked = dialogQueue.then(() => {
    const dialog = $('#token-dialog');
    $('#token-title').textContent = title;
    $('#token-label').replaceChildren(...label);
    $('#token-why').textContent = why;
    $('#token-error').textContent = error || '';
    const input = $('#token');
    input.value = '';
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => {
        resolve(dialog.returnValue === 'send' && input.value ? input.value : null);
      }, { once: true });
      dialog.returnValue = '';
      dialog.showModal();
      input.focus();
    });
  });
  dialogQueue = asked.catch(() => null);
  return asked;
}

const DONE = { ack: 'acknowledged', pause: 'paused', resume: 'resumed', check: 'asked to check now', delete: 'deleted' };

// One write of an object's action; the outcome is the notice.
async function act(button, id, what, action) {
  if (action === 'delete') {
    const dialog = $('#confirm-dialog');
    $('#confirm-text').textContent = `Delete ${id}? Its checks stop and it leaves the list; its history stays in the store.`;
    dialog.returnValue = '';
    dialog.showModal();
    const answer = await new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue), { once: true }));
    if (answer !== 'yes') return;
  }
  const path = action === 'delete'
    ? `/api/objects/${encodeURIComponent(id)}`
    : `/api/objects/${encodeURIComponent(id)}/actions/${action}`;
  await write(button, action === 'delete' ? 'DELETE' : 'POST', path, null, what, id,
    (body) => `${id}: ${DONE[action]} (log position ${body.seq}, epoch ${body.epoch}, by ${body.owner}).`);
}

// One write; a 401 asks for the write token (again, saying it was refused, when one was sent) and retries. The
// notice says `done(body)` on a 200, else the status and the reason; `what` and `id` name the write in it.
async function write(button, method, path, json, what, id, done) {
  if (button) button.disabled = true;
  try {
    for (;;) {
      const headers = authHeaders('application/json');
      if (json !== null) headers['content-type'] = 'application/json';
      const r = await fetch(path, { method, headers, body: json === null ? undefined : JSON.stringify(json) });
      let body = null;
      try { body = await r.json(); } catch (_) { /* not JSON */ }
      if (r.status === 401) {
        const refused = app.token !== '';
        const msg = refused
          ? '401 Unauthorized: the token sent is not the write token.'
          : '401 Unauthorized: this ui takes writes only with its write token.';
        const token = await askToken({
          title: 'Write token',
          label: ['The ui\'s write token (', h('code', null, '-write-token'), ')'],
          why: `To ${what} ${id}, enter the write token.`,
          error: refused ? msg : '',
        });
        if (token === null) {
          notice(`${msg} ${what} ${id} was not sent.`, true);
          return;
        }
        useToken(token);
        continue;
      }
      if (r.status === 200) {
        notice(done(body), false);
      } else {
        const why = body && (body.reason || body.error || body.outcome);
        notice(`${what} ${id}: ${r.status} ${r.statusText}${why ? `: ${why}` : ''}`, true);
      }
      return;
    }
  } catch (e) {
    notice(`${what} ${id}: no answer (${e.message}); is the ui running?`, true);
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}

// ---- one object --------------------------------------------------------------------------------------------

async function loadObject() {
  const id = app.objectId;
  const [o, hist] = await Promise.all([
    getJSON(`/api/objects/${encodeURIComponent(id)}`),
    getJSON(`/api/objects/${encodeURIComponent(id)}/history?limit=25`),
  ]);
  app.object = o.status === 200 ? o.body : null;
  app.objectGone = o.status === 404;
  app.history = hist;
}

async function refreshHistory() {
  try {
    app.history = await getJSON(`/api/objects/${encodeURIComponent(app.objectId)}/history?limit=25`);
  } catch (e) {
    if (!(e instanceof Unauthorized)) notice(`Could not load the history: ${e.message}`, true);
    return;
  }
  renderObject();
}

function probeText(p) {
  if (p.type === 'http') return `HTTP GET ${p.url}${p.expect_status ? ` (expects ${p.expect_status})` : ''}`;
  if (p.type === 'tcp') return `TCP connect ${p.addr}`;
  if (p.type === 'exec') return `plugin ${p.plugin} ${(p.args || []).join(' ')}`;
  return JSON.stringify(p);
}

function renderObject() {
  const id = app.objectId;
  $('#object-title').textContent = id;
  const body = $('#object-body');
  const o = app.object;
  if (!o) {
    body.replaceChildren(h('p', {}, app.objectGone ? `There is no object ${id} (deleted, or never defined).` : 'Loading…'));
    return;
  }
  const t = o.last_transition;
  const d = o.definition;
  const s = o.soft;
  const facts = h('dl', { class: 'facts' },
    h('dt', {}, 'State'), h('dd', { id: 'object-state' }, badge(o.state), ' for ',
      h('span', { class: 'for', 'data-since': o.state_since_ms }, fmtDuration(Date.now() - o.state_since_ms)),
      ` (since ${fmtTime(o.state_since_ms)})`),
    h('dt', {}, 'Soft state'), h('dd', { id: 'object-soft' }, s
      ? [h('span', { class: `badge soft ${s.state}` }, `${s.state} ${s.attempt}/${s.of}`),
        ` attempt ${s.attempt} of ${s.of} at ${fmtTime(s.at_ms)}: ${s.output}`]
      : 'none: the latest result agrees with the state'),
    h('dt', {}, 'Marks'), h('dd', {}, marks(o), !o.acknowledged && !o.paused && !o.flapping && !o.held ? 'none' : null),
    h('dt', {}, 'Labels'), h('dd', { id: 'object-labels' }, labelChips(d.labels) || 'none'),
    h('dt', {}, 'Probe'), h('dd', { class: 'mono' }, probeText(d.probe)),
    h('dt', {}, 'Interval'), h('dd', {}, d.interval),
    h('dt', {}, 'Timeout'), h('dd', {}, d.timeout),
    h('dt', {}, 'Alerting'), h('dd', { id: 'object-rules' },
      `hard after ${d.max_attempts} problem result${d.max_attempts === 1 ? '' : 's'} in a row, retried every ${d.retry_interval}; `
      + `recovered after ${d.recovery_attempts} ok result${d.recovery_attempts === 1 ? '' : 's'}; `
      + `flapping detection ${d.flapping ? 'on' : 'off'}`),
    h('dt', {}, 'Owner'), h('dd', { class: 'mono' }, o.owner || 'none (no epoch in force)'),
    h('dt', {}, 'Epoch'), h('dd', {}, String(o.epoch)),
    h('dt', {}, 'Last event'), h('dd', {}, `log position ${o.last_seq}`));
  const parts = [facts, h('div', { class: 'actions-bar', role: 'group', 'aria-label': 'Actions' }, actionButtons(o, false))];
  parts.push(h('h3', {}, 'Last transitions'));
  const hist = app.history;
  if (hist && hist.status === 200) {
    const events = hist.body.events;
    parts.push(events.length === 0 ? h('p', {}, 'The store has no events of this object yet.') :
      h('table', { id: 'history' },
        h('caption', { class: 'visually-hidden' }, 'Events of this object in the store, newest first'),
        h('thead', {}, h('tr', {}, ['Position', 'When', 'Event', 'Output', 'Writer', 'Epoch'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, events.map((e) => h('tr', { 'data-type': e.type },
          h('td', {}, String(e.seq)), h('td', {}, fmtTime(Date.parse(e.at))),
          h('td', {}, e.type === 'transition' ? [badge(e.from_state), ' → ', badge(e.to_state)] : e.type),
          h('td', { class: 'output' }, e.output || ''), h('td', { class: 'mono' }, e.writer), h('td', {}, String(e.epoch)))))));
    parts.push(h('p', { class: 'muted' }, 'From the sink\'s store (GET /api/objects/{id}/history), newest first.'));
  } else {
    if (t) {
      parts.push(h('table', { id: 'history' },
        h('thead', {}, h('tr', {}, ['Position', 'When', 'Transition', 'Output', 'Writer', 'Epoch'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, h('tr', { 'data-type': 'transition' }, h('td', {}, String(t.seq)), h('td', {}, fmtTime(t.at_ms)),
          h('td', {}, [badge(t.from), ' → ', badge(t.to)]), h('td', { class: 'output' }, t.output),
          h('td', { class: 'mono' }, t.writer), h('td', {}, String(t.epoch))))));
    } else {
      parts.push(h('p', {}, 'No transition yet.'));
    }
    parts.push(h('p', {}, hist && hist.status === 404
      ? 'Only the last transition: this ui has no store of the history (run it with -sink-store).'
      : `Only the last transition: the history could not be read (${hist ? hist.status : 'no answer'}).`));
  }
  body.replaceChildren(...parts);
}

// ---- the cluster -------------------------------------------------------------------------------------------

async function loadCluster() {
  const r = await getJSON('/api/cluster');
  if (r.status !== 200) throw new Error(`/api/cluster: ${r.status}`);
  app.cluster = r.body;
  app.staleTotal = r.body.stale_events;
}

function member(m) { return h('li', { class: 'mono' }, `${m.id} (incarnation ${m.incarnation})`); }

function renderCluster() {
  const c = app.cluster;
  const body = $('#cluster-body');
  if (!c) { body.replaceChildren(h('p', {}, 'Loading…')); return; }
  const engines = c.buckets.find((b) => b.bucket === 'membership/');
  const cards = h('div', { class: 'cards' },
    h('section', { class: 'card', 'aria-labelledby': 'epoch-h' },
      h('h3', { id: 'epoch-h' }, `Epoch in force: ${engines ? engines.epoch : '–'}`),
      h('p', {}, 'Its members (the owners by HRW):'),
      h('ul', { id: 'epoch-members' }, (engines ? engines.epoch_members : []).map(member)),
      h('p', {}, `Log position ${c.log_position}.`)),
    ...c.buckets.map((b) => h('section', { class: 'card', 'aria-label': `Bucket ${b.bucket}` },
      h('h3', {}, h('code', {}, b.bucket), ` — ${b.live_members.length} live`),
      b.live_members.length ? h('ul', {}, b.live_members.map(member)) : h('p', {}, 'No live member.'))));
  const parts = [cards];
  if (engines) {
    const owners = Object.entries(engines.objects_per_owner);
    parts.push(h('h3', {}, `Objects per owner (${engines.objects} objects)`),
      h('table', { id: 'owners' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Owner'), h('th', { scope: 'col' }, 'Objects'))),
        h('tbody', {}, owners.map(([o, n]) => h('tr', {}, h('td', { class: 'mono' }, o), h('td', {}, String(n)))),
          engines.objects_unowned ? h('tr', {}, h('td', {}, 'no owner'), h('td', {}, String(engines.objects_unowned))) : null)));
  }
  parts.push(h('h3', {}, `Stale events: ${app.staleTotal ?? c.stale_events}`),
    h('p', {}, 'Events the epoch fence discarded: their writer no longer owned the object.'),
    app.stale.length === 0 ? h('p', {}, 'None since this page opened.') :
      h('table', { id: 'stale' },
        h('thead', {}, h('tr', {}, ['Position', 'Object', 'Writer', 'Its epoch'].map((x) => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, app.stale.map((s) => h('tr', {}, h('td', {}, String(s.seq)), h('td', { class: 'mono' }, s.object),
          h('td', { class: 'mono' }, `${s.writer.id} (${s.writer.incarnation})`), h('td', {}, String(s.epoch)))))));
  body.replaceChildren(...parts);
}

// ---- silences and maintenance windows -------------------------------------------------------------------------

async function loadSilences() {
  const [s, p] = await Promise.all([getJSON('/api/silences'), getJSON('/api/policy')]);
  if (s.status !== 200) throw new Error(`/api/silences: ${s.status}`);
  if (p.status !== 200) throw new Error(`/api/policy: ${p.status}`);
  app.silences = s.body.silences;
  app.windows = p.body.windows;
}

function scheduleText(s) {
  const days = s.days && s.days.length ? s.days.join(', ') : 'every day';
  return `${days} at ${s.start} for ${s.duration} (${s.time_zone})`;
}

function renderSilences() {
  const body = $('#silences-body');
  if (!app.silences) { body.replaceChildren(h('p', {}, 'Loading…')); return; }
  const byEnd = (a, b) => (a.active === b.active ? a.ends_at.localeCompare(b.ends_at) : a.active ? -1 : 1);
  const rows = [...app.silences].sort(byEnd).map((x) => h('tr', { 'data-name': x.name, 'data-active': String(x.active) },
    h('td', { class: 'mono' }, x.name), h('td', { class: 'mono' }, x.selector || '(every object)'),
    h('td', {}, x.active ? 'active' : 'ended or not started'), h('td', {}, `${x.starts_at} – ${x.ends_at}`),
    h('td', {}, x.author), h('td', {}, x.comment || ''),
    h('td', {}, x.active ? h('button', {
      type: 'button', class: 'expire',
      onclick: (ev) => write(ev.currentTarget, 'DELETE', `/api/silences/${encodeURIComponent(x.name)}`, null, 'expire', x.name,
        (b) => `silence ${x.name}: expired (log position ${b.seq}).`),
    }, 'Expire') : null)));
  const silences = app.silences.length === 0 ? h('p', { id: 'no-silences' }, 'No silences.') :
    h('table', { id: 'silences' },
      h('caption', { class: 'visually-hidden' }, 'Silences, the active ones first'),
      h('thead', {}, h('tr', {}, ['Name', 'Selector', 'Now', 'From – until', 'Author', 'Comment', 'Actions'].map((x) => h('th', { scope: 'col' }, x)))),
      h('tbody', {}, rows));
  const windows = (app.windows || []).length === 0 ? h('p', { id: 'no-windows' }, 'No maintenance windows.') :
    h('table', { id: 'windows' },
      h('caption', { class: 'visually-hidden' }, 'Maintenance windows'),
      h('thead', {}, h('tr', {}, ['Name', 'Selector', 'When', 'Comment'].map((x) => h('th', { scope: 'col' }, x)))),
      h('tbody', {}, app.windows.map((w) => h('tr', { 'data-name': w.name },
        h('td', { class: 'mono' }, w.name), h('td', { class: 'mono' }, w.selector || '(every object)'),
        h('td', {}, scheduleText(w.schedule)), h('td', {}, w.comment || '')))));
  body.replaceChildren(h('h3', {}, 'Silences'), silences, h('h3', {}, 'Maintenance windows'), windows);
}

// The form: silence the objects a selector picks for a while, from now.
async function silence(ev) {
  ev.preventDefault();
  const form = ev.currentTarget;
  const json = {
    selector: form.elements['silence-selector'].value.trim(),
    duration: form.elements['silence-duration'].value.trim(),
    author: form.elements['silence-author'].value.trim(),
  };
  const comment = form.elements['silence-comment'].value.trim();
  if (comment) json.comment = comment;
  await write(form.querySelector('button[type=submit]'), 'POST', '/api/silences', json, 'silence', json.selector || 'every object',
    (b) => `silence ${b.name}: ${json.selector || 'every object'} for ${json.duration} (log position ${b.seq}).`);
}

// ---- views and filters ---------------------------------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  let m;
  if ((m = hash.match(/^\/object\/(.+)$/))) {
    app.view = 'object';
    app.objectId = decodeURIComponent(m[1]);
    app.object = null;
    app.history = null;
  } else if (hash === '/cluster') {
    app.view = 'cluster';
  } else if (hash === '/silences') {
    app.view = 'silences';
  } else {
    app.view = 'objects';
  }
  for (const v of ['objects', 'object', 'cluster', 'silences']) $(`#view-${v}`).hidden = app.view !== v;
  const nav = app.view === 'object' ? 'objects' : app.view;
  for (const v of ['objects', 'cluster', 'silences']) {
    $(`#nav-${v}`).removeAttribute('aria-current');
    if (v === nav) $(`#nav-${v}`).setAttribute('aria-current', 'page');
  }
  document.title = app.view === 'object' ? `${app.objectId} · jaque` : app.view === 'objects' ? 'jaque' : `${app.view} · jaque`;
  if (app.view === 'object') renderObject();
  if (app.view === 'cluster') renderCluster();
  if (app.view === 'silences') renderSilences();
  load();
}

function readFilter() {
  app.filter.q = $('#q').value.trim();
  app.filter.states = new Set([...document.querySelectorAll('#filters input[name=state]:checked')].map((i) => i.value));
  const selector = $('#selector').value.trim();
  if (selector !== app.filter.selector) {
    app.filter.selector = selector;
    app.filter.picks = selector ? selectorMatcher(selector) : null;
    app.filter.selectorError = null;
  }
}

function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll('[data-since]')) {
    el.textContent = fmtDuration(now - Number(el.dataset.since));
  }
}

function start() {
  app.lists.problems = makeList('problems', PROBLEMS);
  app.lists.rest = makeList('rest', ['pending', 'ok']);
  let searchTimer = null;
  $('#q').addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { readFilter(); load(); }, 250);
  });
  let selectorTimer = null;
  $('#selector').addEventListener('input', () => {
    clearTimeout(selectorTimer);
    selectorTimer = setTimeout(() => { readFilter(); load(); }, 400);
  });
  $('#filters').addEventListener('change', (ev) => {
    if (ev.target.name === 'state') { readFilter(); load(); }
    if (ev.target.name === 'group') {
      app.group = ev.target.value;
      if (app.view === 'objects') { renderList(app.lists.problems); renderList(app.lists.rest); }
    }
  });
  $('#filters').addEventListener('submit', (ev) => { ev.preventDefault(); readFilter(); load(); });
  $('#silence-form').addEventListener('submit', silence);
  window.addEventListener('hashchange', () => {
    route();
    $('#main').focus();
  });
  setInterval(tick, 5000);
  readFilter();
  route();
  connect();
}

document.addEventListener('DOMContentLoaded', start);
