/*
 * app.js - the Trainyard web page: jobs, one job (with where it stands while it waits), runs
 * compared, sweeps, teams (quota against usage) and the cluster, over the REST API.
 *
 * Rules this file keeps:
 * - Every string that comes from the server (names, labels, env, log lines, messages) reaches the
 *   DOM as text: through h() (children become text nodes), textContent or Text.appendData.
 *   Nothing here parses a string as HTML (tests/unit/test_api_ui.c checks for the DOM's ways to);
 *   user data goes into no attribute but data-* values.
 * - The token lives in sessionStorage only and goes out as `Authorization: Bearer` on every call;
 *   a 401 asks for another one.
 * - Live updates come from Server-Sent Events read with fetch() and a stream reader (EventSource
 *   cannot send a header), parsed here, resumed with Last-Event-ID after a drop.
 * - Everything a view starts (streams, charts, timers) belongs to its Page and ends with it.
 */
'use strict';

(function () {
  const TOKEN_KEY = 'trainyard.token';
  const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
  const STATES = ['PENDING', 'ADMITTED', 'STARTING', 'RUNNING', 'RESTARTING', 'CANCELLING',
    'SUCCEEDED', 'FAILED', 'CANCELLED'];
  const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777',
    '#65a30d', '#475569', '#ea580c'];
  const LOG_KEEP = 256 * 1024;   /* characters of a log tail kept on the page */
  const STALL_MS = 45000;        /* no byte (not even the 15 s ping) for this long: reconnect */
  const MAX_COMPARE = 50;        /* jobs overlaid in the compare view */
  const CHART_MAX = 4000;        /* points a growing chart holds before it is read again */
  const PENDING_POLL_MS = 2000;  /* a waiting job's place is read again this often: it moves
                                    when other jobs come and go, which its own stream does not
                                    tell */
  const TEAMS_POLL_MS = 5000;    /* the teams view is read again this often */
  const MAX_SERIES = 12;         /* metric series a job's page shows (loss and accuracy first) */

  /* What the browser tests read (window.trainyard). */
  const exported = { cspViolations: [], SseParser: null, charts: {} };
  window.trainyard = exported;
  document.addEventListener('securitypolicyviolation', (e) => {
    exported.cspViolations.push({ directive: e.violatedDirective, blocked: e.blockedURI });
  });

  /* ---- DOM ------------------------------------------------------------------------------- */

  /* An element; string children become text nodes, never markup. */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    add(el, children);
    return el;
  }

  function add(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function badge(state) {
    return h('span', { class: 'badge state-' + String(state).toLowerCase() }, state);
  }

  function labelChips(labels) {
    return Object.entries(labels || {}).map(([k, v]) => h('span', { class: 'chip' }, k + '=' + v));
  }

  function fmtTime(t) {
    if (!t) return '';
    const d = new Date(t);
    if (Number.isNaN(d.getTime())) return String(t);
    const p = (n) => String(n).padStart(2, '0');
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' +
      p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
  }

  function jobHref(id) { return '#/jobs/' + encodeURIComponent(id); }

  function setLive(mode, text) {
    const el = document.getElementById('live');
    el.dataset.mode = mode;
    el.textContent = text;
  }

  /* ---- the API --------------------------------------------------------------------------- */

  class AuthError extends Error {}

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  async function api(path, opts) {
    const o = Object.assign({ cache: 'no-store' }, opts || {});
    const headers = new Headers(o.headers || {});
    headers.set('Authorization', 'Bearer ' + token());
    o.headers = headers;
    const r = await fetch(path, o);
    if (r.status === 401) {
      askToken('The server refused that token (401); enter another.');
      throw new AuthError('unauthorized');
    }
    return r;
  }

  async function apiError(r) {
    let code = '', msg = r.status + ' ' + r.statusText;
    try {
      const p = await r.json();
      code = p.code || '';
      msg = [p.title, p.detail].filter(Boolean).join(': ') || msg;
    } catch (e) { /* not a problem document */ }
    return new ApiError(r.status, code, msg);
  }

  async function apiJson(path, opts) {
    const r = await api(path, opts);
    if (!r.ok) throw await apiError(r);
    return r.json();
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); },
        { once: true });
    });
  }

  /* ---- Server-Sent Events ---------------------------------------------------------------- */

  /*
   * The event-stream format (HTML Living Standard, "Server-sent events"): lines ended by CRLF,
   * LF or CR; `field: value` lines; a blank line dispatches the event; `:` starts a comment.
   * push() takes text in chunks cut anywhere; onEvent gets {event, id, data} where id is the
   * last id seen so far (the value to resume from).
   */
  class SseParser {
    constructor(onEvent) {
      this.onEvent = onEvent;
      this.buf = '';
      this.data = [];
      this.type = '';
      this.lastId = null;
      this.retry = null;
    }

    push(text) {
      this.buf += text;
      for (;;) {
        const m = /\r\n|\r|\n/.exec(this.buf);
        if (!m) break;
        /* A CR that ends the text may be the first half of a CRLF cut between chunks. */
        if (m[0] === '\r' && m.index === this.buf.length - 1) break;
        const line = this.buf.slice(0, m.index);
        this.buf = this.buf.slice(m.index + m[0].length);
        this.line(line);
      }
    }

    line(line) {
      if (line === '') {
        if (this.data.length) {
          this.onEvent({ event: this.type || 'message', id: this.lastId,
            data: this.data.join('\n') });
        }
        this.data = [];
        this.type = '';
        return;
      }
      if (line[0] === ':') return;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let value = c < 0 ? '' : line.slice(c + 1);
      if (value[0] === ' ') value = value.slice(1);
      if (field === 'event') this.type = value;
      else if (field === 'data') this.data.push(value);
      else if (field === 'id' && !value.includes('\0')) this.lastId = value;
      else if (field === 'retry' && /^[0-9]+$/.test(value)) this.retry = Number(value);
    }
  }
  exported.SseParser = SseParser;

  /*
   * Follows an event stream until the page ends: hd.onEvent(ev) per event, hd.onMode(mode) when
   * the connection goes live, drops or ends. After a drop (the server restarted, a proxy cut it,
   * nothing arrived for STALL_MS) it connects again with Last-Event-ID, waiting longer each time
   * (1 s to 15 s), unless hd.done() says the stream has said all it will (a finished job's). A
   * route that answers anything but an event stream (404: this server has no such stream; 400)
   * ends the loop with hd.onUnsupported(response).
   */
  async function follow(page, url, hd) {
    let lastId = null;
    let delay = 1000;
    while (!page.signal.aborted) {
      const conn = new AbortController();
      const stop = () => conn.abort();
      page.signal.addEventListener('abort', stop, { once: true });
      connections.add(conn);
      let watchdog = null;
      const arm = () => { clearTimeout(watchdog); watchdog = setTimeout(stop, STALL_MS); };
      try {
        const headers = { Accept: 'text/event-stream' };
        if (lastId !== null) headers['Last-Event-ID'] = lastId;
        arm();
        const r = await api(url, { headers, signal: conn.signal });
        const ct = r.headers.get('Content-Type') || '';
        if (r.ok && ct.startsWith('text/event-stream')) {
          hd.onMode('live');
          /* Without a cursor the stream starts now: what changed before is read again. */
          if (lastId === null && hd.onFresh) hd.onFresh();
          delay = 1000;
          const parser = new SseParser((ev) => {
            if (ev.id !== null) lastId = ev.id;
            try { hd.onEvent(ev); } catch (e) { console.error(e); }
          });
          const reader = r.body.getReader();
          const dec = new TextDecoder();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            arm();
            parser.push(dec.decode(value, { stream: true }));
          }
        } else if (r.status === 429) {
          /* Too many streams open (this token's or the server's): wait as told, then again. */
          const after = Number(r.headers.get('Retry-After'));
          if (after > 0) delay = Math.max(delay, Math.min(after * 1000, 60000));
        } else if (r.status < 500) {
          hd.onUnsupported(r);
          return;
        }
      } catch (e) {
        if (e instanceof AuthError) return;
      } finally {
        clearTimeout(watchdog);
        page.signal.removeEventListener('abort', stop);
        connections.delete(conn);
      }
      if (page.signal.aborted) return;
      if (hd.done && hd.done()) {
        hd.onMode('ended');
        return;
      }
      hd.onMode('reconnecting');
      await sleep(delay, page.signal);
      while (held) await held;
      delay = Math.min(delay * 2, 15000);
    }
  }

  /*
   * The open stream connections, and a way for the browser tests to cut them and to hold the
   * reconnection back (a drop that lasts while the world changes), then let it go.
   */
  const connections = new Set();
  let held = null;
  let release = null;
  exported.dropStreams = () => {
    if (!held) held = new Promise((resolve) => { release = resolve; });
    for (const c of connections) c.abort();
  };
  exported.resumeStreams = () => {
    if (release) release();
    held = null;
    release = null;
  };

  /* ---- pages ----------------------------------------------------------------------------- */

  /* What one view owns; route() ends it before the next view starts. */
  class Page {
    constructor() { this.ac = new AbortController(); this.charts = []; this.timers = []; }
    get signal() { return this.ac.signal; }
    end() {
      this.ac.abort();
      for (const c of this.charts) c.destroy();
      for (const t of this.timers) clearInterval(t);
    }
  }

  let current = null;

  function parseHash() {
    const raw = location.hash.replace(/^#/, '') || '/jobs';
    const q = raw.indexOf('?');
    return {
      path: q < 0 ? raw : raw.slice(0, q),
      params: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)),
    };
  }

  function route() {
    if (current) current.end();
    current = null;
    const view = document.getElementById('view');
    view.replaceChildren();
    document.body.dataset.ready = '';
    if (!token()) { askToken(''); return; }
    document.getElementById('login').hidden = true;
    document.getElementById('signout').hidden = false;
    setLive('off', 'not live');
    const page = current = new Page();
    const { path, params } = parseHash();
    let m, run;
    if (path === '/jobs' || path === '/') run = jobsPage(page, view, params);
    else if ((m = /^\/jobs\/([0-9a-z]{1,64})$/.exec(path))) run = jobPage(page, view, m[1]);
    else if (path === '/compare') run = comparePage(page, view, params);
    else if (path === '/sweeps') run = sweepsPage(page, view);
    else if (path === '/teams') run = teamsPage(page, view);
    else if ((m = /^\/sweeps\/([0-9a-z]{1,64})$/.exec(path))) run = sweepPage(page, view, m[1]);
    else if (path === '/cluster') run = clusterPage(page, view);
    else run = Promise.resolve(add(view, [h('p', { class: 'error' }, 'No such page: ' + path)]));
    document.body.dataset.view = m ? path.split('/')[1].replace(/s$/, '') :
      (path.split('/')[1] || 'jobs');
    run.then(() => { if (!page.signal.aborted) document.body.dataset.ready = '1'; },
      (e) => {
        if (e instanceof AuthError || page.signal.aborted) return;
        add(view, [h('p', { class: 'error' }, String(e.message || e))]);
        document.body.dataset.ready = 'error';
      });
  }

  function askToken(message) {
    if (current) current.end();
    current = null;
    sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById('view').replaceChildren();
    document.getElementById('signout').hidden = true;
    document.getElementById('login').hidden = false;
    document.getElementById('login-error').textContent = message || '';
    setLive('off', 'not live');
    document.body.dataset.view = 'login';
    document.getElementById('login-token').focus();
  }

  /* ---- the jobs table -------------------------------------------------------------------- */

  function filtersQuery(params) {
    const q = new URLSearchParams();
    for (const s of params.getAll('state')) if (s) q.append('state', s);
    if (params.get('queue')) q.set('queue', params.get('queue'));
    for (const l of params.getAll('label')) {
      for (const one of l.split(/[\s,]+/)) if (one) q.append('label', one);
    }
    return q;
  }

  function matches(job, params) {
    const states = params.getAll('state').filter(Boolean).flatMap((s) => s.split(','))
      .map((s) => s.toUpperCase());
    if (states.length && !states.includes(job.state)) return false;
    const queue = params.get('queue');
    if (queue && job.queue !== queue) return false;
    const labels = (job.spec && job.spec.labels) || {};
    for (const l of params.getAll('label').flatMap((s) => s.split(/[\s,]+/))) {
      if (!l) continue;
      const eq = l.indexOf('=');
      if (eq < 0 || labels[l.slice(0, eq)] !== l.slice(eq + 1)) return false;
    }
    return true;
  }

  function jobRow(job) {
    return h('tr', { dataset: { id: job.id, state: job.state } },
      h('td', { class: 'name' }, h('a', { href: jobHref(job.id) }, job.name)),
      h('td', { class: 'id mono' }, job.id),
      h('td', { class: 'state' }, badge(job.state)),
      h('td', {}, job.queue),
      h('td', { class: 'labels' }, labelChips(job.spec && job.spec.labels)),
      h('td', { class: 'time' }, fmtTime(job.created_at)),
      h('td', { class: 'num' }, String(job.attempt)));
  }

  function filterForm(params) {
    const state = h('select', { name: 'state' }, h('option', { value: '' }, 'any state'),
      STATES.map((s) => h('option', { value: s }, s)));
    state.value = (params.get('state') || '').toUpperCase();
    const queue = h('input', { name: 'queue', placeholder: 'queue', spellcheck: 'false' });
    queue.value = params.get('queue') || '';
    const label = h('input', { name: 'label', placeholder: 'label k=v (several: k=v,k2=v2)',
      spellcheck: 'false', class: 'wide' });
    label.value = params.getAll('label').join(',');
    return h('form', {
      class: 'filters',
      onsubmit: (e) => {
        e.preventDefault();
        const q = new URLSearchParams();
        if (state.value) q.set('state', state.value);
        if (queue.value.trim()) q.set('queue', queue.value.trim());
        if (label.value.trim()) q.set('label', label.value.trim());
        const s = q.toString();
        location.hash = '#/jobs' + (s ? '?' + s : '');
      },
    }, state, queue, label, h('button', { type: 'submit' }, 'Filter'),
    h('a', { href: '#/compare' + (label.value ? '?' + new URLSearchParams({ label: label.value })
      : ''), class: 'button' }, 'Compare these'));
  }

  async function jobsPage(page, view, params) {
    const filters = filtersQuery(params);
    const tbody = h('tbody');
    const rows = new Map();
    const more = h('button', { type: 'button', hidden: true }, 'More');
    const count = h('span', { class: 'muted' });
    add(view, [
      h('h1', {}, 'Jobs'), filterForm(params),
      h('table', { class: 'jobs', id: 'jobs' },
        h('thead', {}, h('tr', {}, ['name', 'id', 'state', 'queue', 'labels', 'created',
          'attempt'].map((c) => h('th', {}, c)))),
        tbody),
      h('p', {}, more, ' ', count),
    ]);

    const place = (job, atTop) => {
      const old = rows.get(job.id);
      if (!matches(job, params)) {
        if (old) { old.remove(); rows.delete(job.id); }
        return;
      }
      const tr = jobRow(job);
      if (old) old.replaceWith(tr);
      else if (atTop) tbody.prepend(tr);
      else tbody.append(tr);
      rows.set(job.id, tr);
      count.textContent = rows.size + ' jobs shown';
    };

    let pageToken = null;
    const load = async () => {
      const q = new URLSearchParams(filters);
      q.set('limit', '100');
      if (pageToken) q.set('page_token', pageToken);
      const list = await apiJson('/v1/jobs?' + q, { signal: page.signal });
      for (const job of list.jobs) if (!rows.has(job.id)) place(job, false);
      pageToken = list.next_page_token || null;
      more.hidden = !pageToken;
      count.textContent = rows.size + ' jobs shown';
    };
    more.addEventListener('click', () => load().catch(() => {}));
    await load();

    /* Events say what changed; the row is drawn from the job as GET returns it (attempt). */
    const due = new Set();
    let flushing = false;
    const flush = async () => {
      if (flushing) return;
      flushing = true;
      try {
        while (due.size && !page.signal.aborted) {
          const ids = [...due].slice(0, 8);
          ids.forEach((id) => due.delete(id));
          await Promise.all(ids.map((id) =>
            apiJson('/v1/jobs/' + encodeURIComponent(id), { signal: page.signal })
              .then((job) => place(job, true), () => {})));
        }
      } finally { flushing = false; }
    };
    follow(page, '/v1/events?' + new URLSearchParams([...filters, ['follow', 'true']]), {
      onMode: (m) => setLive(m, m === 'live' ? 'live' : 'reconnecting…'),
      onFresh: () => {
        /* Jobs submitted between the list's read and the stream's start. */
        const q = new URLSearchParams(filters);
        q.set('limit', '100');
        apiJson('/v1/jobs?' + q, { signal: page.signal }).then((list) => {
          for (const job of list.jobs.slice().reverse()) if (!rows.has(job.id)) place(job, true);
        }, () => {});
      },
      onUnsupported: () => setLive('unavailable', 'not live (no event stream)'),
      onEvent: (ev) => {
        if (ev.event !== 'job') return;
        const d = JSON.parse(ev.data);
        const tr = rows.get(d.job_id);
        if (tr && d.to) {
          tr.dataset.state = d.to;
          tr.querySelector('td.state').replaceChildren(badge(d.to));
        }
        due.add(d.job_id);
        flush();
      },
    });
  }

  /* ---- the cluster ----------------------------------------------------------------------- */

  function table(id, columns, rows) {
    return h('table', { class: 'jobs', id }, h('thead', {}, h('tr', {},
      columns.map((c) => h('th', {}, c)))), h('tbody', {}, rows));
  }

  function num(v) { return h('td', { class: 'num' }, String(v)); }

  /*
   * The cluster as placement sees it (GET /v1/cluster): nodes and GPUs per zone and GPU type,
   * the profile's node groups, the GPU nodes the profile does not know, and the nodes out of
   * rotation with the failures that put them there; an admin's token may release one. Read
   * again every few seconds.
   */
  async function clusterPage(page, view) {
    const body = h('div', { id: 'cluster' });
    add(view, [h('h1', {}, 'Cluster'), body]);
    const release = async (name) => {
      const r = await api('/v1/cluster/nodes/' + encodeURIComponent(name) + ':release',
        { method: 'POST', signal: page.signal });
      if (!r.ok) throw await apiError(r);
    };
    const load = async () => {
      const c = await apiJson('/v1/cluster', { signal: page.signal });
      const q = c.quarantine;
      const parts = [
        table('cluster-zones', ['zone', 'GPU type', 'nodes', 'ready', 'cordoned', 'quarantined',
          'spot', 'on-demand', 'GPUs', 'Trainyard', 'others', 'free'],
        c.zones.map((z) => h('tr', { dataset: { zone: z.zone || '', gpuType: z.gpu_type || '' } },
          h('td', {}, z.zone || '-'), h('td', {}, z.gpu_type || '-'), num(z.nodes.total),
          num(z.nodes.ready), num(z.nodes.cordoned), num(z.nodes.quarantined), num(z.nodes.spot),
          num(z.nodes.on_demand), num(z.gpus.allocatable), num(z.gpus.trainyard),
          num(z.gpus.others), h('td', { class: 'num free' }, String(z.gpus.free))))),
      ];
      if (c.node_groups.length) {
        parts.push(section('Node groups', table('cluster-groups', ['group', 'zone', 'GPU type',
          'capacity', 'GPUs per node', 'size', 'max size', 'the cluster names it'],
        c.node_groups.map((g) => h('tr', { dataset: { group: g.name } }, h('td', {}, g.name),
          h('td', {}, g.zone || '-'), h('td', {}, g.gpu_type || '-'), h('td', {}, g.capacity || '-'),
          num(g.gpus_per_node), num(g.size), num(g.max_size),
          h('td', g.mismatch ? { class: 'msg', title: g.mismatch.message } : {},
            g.mismatch ? g.mismatch.node_groups.join(', ') : '-'))))));
      }
      if (c.unknown_nodes.length) {
        parts.push(section('Nodes the cluster profile does not know', table('cluster-unknown',
          ['node', 'zone', 'node group', 'GPU product', 'why'],
          c.unknown_nodes.map((u) => h('tr', { dataset: { node: u.name } }, h('td', {}, u.name),
            h('td', {}, u.zone || '-'), h('td', {}, u.node_group || '-'),
            h('td', {}, u.gpu_product || '-'), h('td', { class: 'msg' }, u.message))))));
      }
      const rows = c.quarantined_nodes.map((n) => {
        const button = h('button', { type: 'button', class: 'release' }, 'Release');
        const err = h('span', { class: 'error' });
        button.addEventListener('click', () => {
          button.disabled = true;
          release(n.name).then(load, (e) => {
            button.disabled = false;
            err.textContent = ' ' + String(e.message || e);
          });
        });
        return h('tr', { dataset: { node: n.name } }, h('td', {}, n.name),
          h('td', { class: 'time' }, fmtTime(n.since)),
          h('td', { class: 'time' }, fmtTime(n.release_at)), h('td', {}, n.reason),
          h('td', {}, h('ul', { class: 'evidence' }, n.evidence.map((f) => h('li', {},
            h('span', { class: 'time' }, fmtTime(f.time)), ' ',
            f.job_id ? h('a', { href: jobHref(f.job_id) }, f.job_id) : 'another team\'s job',
            ' attempt ' + f.attempt + ': ', h('span', { class: 'msg' }, f.cause))))),
          h('td', {}, button, err));
      });
      parts.push(section('Quarantined nodes',
        h('p', { class: 'muted' }, 'A node is taken out of rotation after ' + q.failures +
          ' failures of at least ' + q.min_jobs + ' jobs within ' + q.window_seconds +
          ' s, for ' + q.release_seconds + ' s unless an admin releases it.'),
        rows.length ? table('cluster-quarantined', ['node', 'since', 'until', 'why',
          'failures', ''], rows) : h('p', { class: 'muted', id: 'cluster-none' },
          'No node is quarantined.')));
      body.replaceChildren(...parts);
    };
    await load();
    page.timers.push(setInterval(() => load().catch(() => {}), 5000));
  }

  /* ---- one job --------------------------------------------------------------------------- */

  function section(title, ...body) {
    return h('section', { class: 'panel' }, h('h2', {}, title), body);
  }

  function kv(pairs) {
    return h('dl', { class: 'kv' }, pairs.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }

  function eventItem(ev) {
    return h('li', {},
      h('span', { class: 'time' }, fmtTime(ev.time)), ' ',
      ev.from && ev.from !== ev.to ? [badge(ev.from), ' → '] : null, badge(ev.to), ' ',
      h('strong', {}, ev.reason), ev.message ? [' ', h('span', { class: 'msg' }, ev.message)]
        : null);
  }

  function rankRow(rk) {
    const where = [rk.pid ? 'pid ' + rk.pid : '', rk.pod || '', rk.node ? 'on ' + rk.node : '']
      .filter(Boolean).join(' ');
    const end = rk.signal ? 'signal ' + rk.signal
      : (rk.exit_code !== null && rk.exit_code !== undefined ? 'exit ' + rk.exit_code : '');
    return h('tr', {}, h('td', { class: 'num' }, String(rk.rank)),
      h('td', {}, h('span', { class: 'rank-state rank-' + rk.state }, rk.state)),
      h('td', {}, where), h('td', {}, end), h('td', { class: 'time' }, fmtTime(rk.started_at)),
      h('td', { class: 'time' }, fmtTime(rk.ended_at)));
  }

  function attemptsView(attempts) {
    if (!attempts.length) return h('p', { class: 'muted' }, 'No attempt has started yet.');
    return attempts.slice().reverse().map((a) => h('div', { class: 'attempt' },
      h('h3', {}, 'Attempt ' + a.attempt + ' ', h('span', { class: 'rank-state' }, a.state),
        a.reason ? ' ' + a.reason : '', a.message ? ' — ' + a.message : ''),
      h('p', { class: 'muted' }, 'started ' + fmtTime(a.started_at) +
        (a.ended_at ? ', ended ' + fmtTime(a.ended_at) : '')),
      h('table', { class: 'ranks' }, h('thead', {}, h('tr', {},
        ['rank', 'state', 'where', 'end', 'started', 'ended'].map((c) => h('th', {}, c)))),
      h('tbody', {}, a.ranks.map(rankRow)))));
  }

  /* A Chart.js line chart of {x: step, y: value} series; labels are drawn as text. */
  function lineChart(page, canvas, title, datasets) {
    const chart = new window.Chart(canvas, {
      type: 'line',
      data: { datasets },
      options: {
        animation: false,
        parsing: false,
        normalized: true,
        responsive: true,
        maintainAspectRatio: false,
        interaction: { mode: 'nearest', intersect: false, axis: 'x' },
        elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
        scales: {
          x: { type: 'linear', title: { display: true, text: 'step' } },
          y: { title: { display: true, text: title } },
        },
        plugins: {
          legend: { display: datasets.length > 1 },
          title: { display: true, text: title },
        },
      },
    });
    page.charts.push(chart);
    return chart;
  }

  /* Inserts (or replaces, for a step reported again) a point, keeping data sorted by step. */
  function putPoint(data, x, y) {
    const n = data.length;
    if (!n || data[n - 1].x < x) { data.push({ x, y }); return; }
    let lo = 0, hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (data[mid].x < x) lo = mid + 1;
      else hi = mid;
    }
    if (lo < n && data[lo].x === x) data[lo] = { x, y };
    else data.splice(lo, 0, { x, y });
  }

  function logPanel(page, jobId, rank) {
    const pre = h('pre', { class: 'log', dataset: { rank: String(rank) } });
    const text = document.createTextNode('');
    pre.appendChild(text);
    const status = h('span', { class: 'muted' }, 'connecting…');
    const ac = new AbortController();
    const stop = h('button', { type: 'button', onclick: () => ac.abort() }, 'Stop');
    const panel = h('div', { class: 'logpanel' },
      h('h3', {}, 'rank ' + rank + ' ', status, ' ', stop), pre);
    page.signal.addEventListener('abort', () => ac.abort(), { once: true });
    (async () => {
      try {
        const q = new URLSearchParams({ rank: String(rank), follow: 'true', tail: '500' });
        const r = await api('/v1/jobs/' + encodeURIComponent(jobId) + '/logs?' + q,
          { signal: ac.signal });
        if (!r.ok) { status.textContent = (await apiError(r)).message; return; }
        status.textContent = 'following';
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          text.appendData(dec.decode(value, { stream: true }));
          if (text.length > LOG_KEEP) {
            const cut = text.data.indexOf('\n', text.length - LOG_KEEP);
            text.deleteData(0, cut < 0 ? text.length - LOG_KEEP : cut + 1);
          }
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        status.textContent = 'ended (the rank ended)';
      } catch (e) {
        if (!(e instanceof AuthError)) status.textContent = ac.signal.aborted ? 'stopped'
          : 'dropped: ' + (e.message || e);
      }
    })();
    return panel;
  }

  /*
   * Where a PENDING job stands (its pending_reason): the reason, its positions and the
   * scheduler's sentence; null for a job that is not PENDING.
   */
  function pendingView(job) {
    if (job.state !== 'PENDING') return null;
    const pr = job.pending_reason;
    if (!pr) {
      return h('div', { class: 'pending', id: 'pending', dataset: { reason: '' } },
        h('strong', {}, 'Waiting'), ' for the next admission round to consider it.');
    }
    return h('div', { class: 'pending', id: 'pending', dataset: { reason: pr.reason,
      position: String(pr.position), teamPosition: String(pr.team_position) } },
    h('strong', { class: 'reason' }, pr.reason), ' ',
    h('span', { class: 'position' }, 'position ' + pr.position + ' in the cluster, ' +
      pr.team_position + ' in team ' + job.team),
    h('p', { class: 'msg' }, pr.message));
  }

  /*
   * What the token may do, from GET /v1/whoami: {scopes: [...]} or null where the server does
   * not say (an older server), read once per token.
   */
  const whoamiCache = new Map();
  async function whoami(signal) {
    const t = token();
    if (whoamiCache.has(t)) return whoamiCache.get(t);
    const r = await api('/v1/whoami', { signal });
    const me = r.ok ? await r.json() : null;
    if (r.ok || r.status === 404 || r.status === 405) whoamiCache.set(t, me);
    return me;
  }

  /* Whether a token of these scopes may cancel a job it can see (null: not known, let it try). */
  function mayCancel(me) {
    return !me || me.scopes.includes('submit') || me.scopes.includes('admin');
  }

  /*
   * One metric series of a job: a chart once it has two points or more; while it has one (a
   * final accuracy, a test score), its name, value, step and time, since a chart of one point
   * draws nothing. More points turn the value into a chart.
   */
  class SeriesTile {
    constructor(page, name, color) {
      this.page = page;
      this.name = name;
      this.color = color;
      this.data = [];     /* {x: step, y: value}, ascending by step (downsampled when read) */
      this.last = null;   /* the point of the highest step: {step, value, time} */
      this.total = 0;     /* points reported, as the server counted them, plus those since */
      this.chart = null;
      this.box = h('div', { class: 'metric', dataset: { series: name, kind: 'none' } });
    }

    set(points, total) {
      this.data = points.map((p) => ({ x: p.step, y: p.value }));
      this.last = points.length ? points[points.length - 1] : null;
      this.total = total;
    }

    put(step, value, time) {
      putPoint(this.data, step, value);
      if (!this.last || step >= this.last.step) this.last = { step, value, time };
      this.total++;
    }

    draw() {
      if (this.data.length >= 2) {
        if (this.chart) {
          this.chart.data.datasets[0].data = this.data;
          this.chart.update('none');
          return;
        }
        /* The two series every worker reports keep ids of their own (a name is user data). */
        const known = this.name === 'loss' || this.name === 'accuracy';
        const canvas = h('canvas', { id: known ? 'chart-' + this.name : null });
        this.box.replaceChildren(h('div', { class: 'chartbox' }, canvas));
        this.box.dataset.kind = 'chart';
        this.chart = lineChart(this.page, canvas, this.name, [{ label: this.name, data: this.data,
          borderColor: this.color, backgroundColor: this.color }]);
        if (known) exported.charts[this.name] = this.chart;
      } else if (this.last) {
        this.box.dataset.kind = 'value';
        this.box.replaceChildren(h('div', { class: 'metric-value' },
          h('div', { class: 'metric-name' }, this.name),
          h('div', { class: 'metric-number' }, fmtValue(this.last.value)),
          h('div', { class: 'muted metric-at' }, 'step ' + this.last.step +
            (this.last.time ? ' · ' + fmtTime(this.last.time) : ''))));
      }
    }
  }

  /* Series names as the page orders them: loss, accuracy, then by name. */
  function seriesOrder(a, b) {
    const rank = (n) => (n === 'loss' ? 0 : n === 'accuracy' ? 1 : 2);
    return rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0);
  }

  async function jobPage(page, view, id) {
    const base = '/v1/jobs/' + encodeURIComponent(id);
    let job = await apiJson(base, { signal: page.signal });
    const me = await whoami(page.signal).catch((e) => {
      if (e instanceof AuthError) throw e;
      return null;
    });
    const head = h('div', { class: 'jobhead' });
    const actions = h('div', { class: 'actions', id: 'job-actions' });
    const cancelError = h('p', { class: 'error', id: 'cancel-error', role: 'alert' });
    const summary = h('div');
    const attemptsBox = h('div');
    const timeline = h('ol', { class: 'timeline', id: 'timeline' });
    const chartNote = h('p', { class: 'muted', id: 'metrics-note' });
    const chartGrid = h('div', { class: 'charts', id: 'metrics' });
    const logs = h('div', { class: 'logs' });
    const logButtons = h('p', {});

    /*
     * Cancelling: a dialog in the page asks first (window.confirm would stop the page's script
     * and cannot be styled); the API's answer, a problem included, is what the page shows.
     */
    const confirmText = h('p', {});
    const dialog = h('dialog', { id: 'cancel-dialog', class: 'confirm' },
      h('form', { method: 'dialog' },
        h('h2', {}, 'Cancel this job?'), confirmText,
        h('menu', {},
          h('button', { type: 'submit', value: 'keep', id: 'cancel-keep', autofocus: true },
            'Keep it running'),
          h('button', { type: 'submit', value: 'cancel', id: 'cancel-confirm', class: 'danger' },
            'Cancel job'))));
    let cancelling = false;
    const doCancel = async () => {
      cancelling = true;
      cancelError.textContent = '';
      drawActions();
      try {
        const r = await api(base + ':cancel', { method: 'POST', signal: page.signal });
        if (!r.ok) {
          const e = await apiError(r);
          cancelError.textContent = 'Not cancelled: ' + e.message;
          /* 409: it finished meanwhile; the page shows how. */
          if (r.status === 409) job = await apiJson(base, { signal: page.signal });
        } else {
          job = await r.json();
        }
      } catch (e) {
        if (e instanceof AuthError || page.signal.aborted) return;
        cancelError.textContent = 'Not cancelled: ' + (e.message || e);
      } finally {
        cancelling = false;
      }
      drawJob();
      refresh();
    };
    dialog.addEventListener('close', () => {
      if (dialog.returnValue === 'cancel') doCancel();
    });

    /* One button, updated in place: a redraw never takes it from under the pointer. */
    const allowed = mayCancel(me);
    const cancelButton = h('button', { type: 'button', id: 'cancel-job', class: 'danger',
      title: allowed ? 'Stops every rank and marks the job CANCELLED'
        : 'This token (' + me.name + ') may only read: cancelling needs the submit scope',
    }, 'Cancel job');
    cancelButton.addEventListener('click', () => {
      confirmText.textContent = 'Job ' + job.name + ' (' + job.id + ') is ' + job.state +
        '. Its ranks are stopped and it ends CANCELLED; a cancelled job cannot be resumed.';
      dialog.returnValue = '';
      dialog.showModal();
    });
    add(actions, [cancelButton, allowed ? null
      : h('span', { class: 'muted' }, ' read-only token: it cannot cancel')]);
    const drawActions = () => {
      /* Finished, or already on its way out: nothing to offer. */
      actions.hidden = TERMINAL.has(job.state) || job.state === 'CANCELLING';
      cancelButton.disabled = !allowed || cancelling;
      cancelButton.textContent = cancelling ? 'Cancelling…' : 'Cancel job';
    };

    add(view, [
      head,
      section('Summary', summary),
      section('Metrics', chartNote, chartGrid),
      section('Attempts and ranks', attemptsBox),
      section('Logs', logButtons, logs),
      section('Events', timeline),
      section('Spec', h('pre', { class: 'spec', id: 'spec' }, JSON.stringify(job.spec, null, 2))),
      dialog,
    ]);

    const drawJob = () => {
      drawActions();
      /* add(), not replaceChildren(): a job that is not PENDING has no pendingView (null). */
      head.replaceChildren();
      add(head, [h('h1', {}, job.name, ' ', badge(job.state)),
        h('p', { class: 'mono muted' }, job.id), h('p', {}, labelChips(job.spec.labels)),
        actions, cancelError, pendingView(job)]);
      summary.replaceChildren(kv([
        ['team', job.team], ['owner', job.owner || ''],
        ['queue', job.queue], ['priority', String(job.priority)],
        ['workers', String(job.spec.workers.count)], ['attempt', String(job.attempt)],
        ['restarts', String(job.restarts) + ' of ' + job.spec.restart.max],
        ['created', fmtTime(job.created_at)], ['updated', fmtTime(job.updated_at)],
        ['command', [...job.spec.command, ...job.spec.args].join(' ')],
      ]));
    };
    const drawAttempts = async () => {
      const a = await apiJson(base + '/attempts', { signal: page.signal });
      attemptsBox.replaceChildren(...[attemptsView(a.attempts)].flat());
    };
    drawJob();
    await drawAttempts();
    for (let r = 0; r < Math.min(job.spec.workers.count, 64); r++) {
      logButtons.appendChild(h('button', {
        type: 'button',
        onclick: () => logs.prepend(logPanel(page, id, r)),
      }, 'Follow rank ' + r));
    }

    /*
     * Metrics: every series the job reported (the first MAX_SERIES, loss and accuracy first),
     * downsampled, then the points the job stream brings. Past CHART_MAX points the series
     * are read downsampled again; points that arrive meanwhile wait.
     */
    const tiles = new Map();
    const unseen = new Set();   /* names past MAX_SERIES */
    const tile = (name) => {
      let t = tiles.get(name);
      if (t) return t;
      if (tiles.size >= MAX_SERIES) { unseen.add(name); return null; }
      const color = name === 'loss' ? COLORS[0] : name === 'accuracy' ? COLORS[2]
        : COLORS[(tiles.size + 3) % COLORS.length];
      t = new SeriesTile(page, name, color);
      tiles.set(name, t);
      chartGrid.appendChild(t.box);
      return t;
    };
    const note = () => {
      const names = [...tiles.values()].map((t) => t.name + ' (' + t.total + ' point' +
        (t.total === 1 ? '' : 's') + ')');
      chartNote.textContent = (names.length ? 'Series: ' + names.join(', ')
        : 'No metric reported yet.') + (unseen.size ? '; ' + unseen.size +
        ' more not shown (GET ' + base + '/metrics)' : '');
    };
    const read = async (names) => {
      const q = new URLSearchParams(names.map((n) => ['name', n]));
      q.set('max_points', '1000');
      const m = await apiJson(base + '/metrics?' + q, { signal: page.signal });
      for (const s of m.series || []) if (tiles.has(s.name)) tiles.get(s.name).set(s.points,
        s.total_points);
    };
    try {
      /* Two points of each tell the names, their counts and a lone point's value. */
      const all = await apiJson(base + '/metrics?max_points=2', { signal: page.signal });
      const series = (all.series || []).filter((x) => x.total_points > 0)
        .sort((a, b) => seriesOrder(a.name, b.name));
      for (const x of series) {
        const t = tile(x.name);
        if (t) t.set(x.points, x.total_points);
      }
      const longer = series.filter((x) => x.total_points > 2 && tiles.has(x.name))
        .map((x) => x.name);
      if (longer.length) await read(longer);
      for (const t of tiles.values()) t.draw();
      note();
    } catch (e) {
      if (e instanceof AuthError || page.signal.aborted) throw e;
      chartNote.textContent = 'Metrics unavailable: ' + e.message;
      chartGrid.hidden = true;
    }
    let redraw = 0;
    let reloading = false;
    const waiting = [];
    const put = (points) => {
      for (const p of points) {
        for (const [name, v] of Object.entries(p)) {
          if (name === 'step' || name === 'time' || typeof v !== 'number') continue;
          const t = tile(name);
          if (t) t.put(p.step, v, p.time);
        }
      }
    };
    const draw = () => {
      if (redraw) return;
      redraw = requestAnimationFrame(() => {
        redraw = 0;
        for (const t of tiles.values()) t.draw();
        note();
      });
    };
    const reload = async () => {
      reloading = true;
      try {
        await read([...tiles.keys()]);
      } catch (e) { /* keep what is drawn */ }
      reloading = false;
      put(waiting.splice(0));
      draw();
    };
    const addPoints = (points) => {
      if (reloading) { waiting.push(...points); return; }
      put(points);
      if ([...tiles.values()].some((t) => t.data.length > CHART_MAX)) reload();
      draw();
    };

    let refreshing = null;
    const refresh = () => {
      if (refreshing) return;
      refreshing = setTimeout(async () => {
        refreshing = null;
        try {
          job = await apiJson(base, { signal: page.signal });
          drawJob();
          await drawAttempts();
        } catch (e) { /* the next event tries again */ }
      }, 200);
      page.timers.push(refreshing);
    };

    /* While it waits, its place is read again: jobs ahead of it come and go in silence. */
    let polling = false;
    page.timers.push(setInterval(() => {
      if (job.state !== 'PENDING' || polling) return;
      polling = true;
      apiJson(base, { signal: page.signal }).then((j) => { job = j; drawJob(); }, () => {})
        .finally(() => { polling = false; });
    }, PENDING_POLL_MS));

    /* The job stream sends every existing event first: the timeline is drawn from it. */
    let fromStream = false;
    let finished = false;
    follow(page, base + '/events?follow=true', {
      done: () => finished,
      onMode: (m) => {
        setLive(m, { live: 'live', ended: 'finished' }[m] || 'reconnecting…');
        if (m === 'live' && !fromStream) { timeline.replaceChildren(); fromStream = true; }
      },
      onUnsupported: async (r) => {
        setLive('unavailable', 'not live (no event stream)');
        /* A server without the stream answers the plain list, as JSON. */
        const list = r.ok ? await r.json() : await apiJson(base + '/events',
          { signal: page.signal });
        timeline.replaceChildren(...list.events.map(eventItem));
      },
      onEvent: (ev) => {
        const d = JSON.parse(ev.data);
        if (ev.event === 'job') {
          timeline.appendChild(eventItem(d));
          if (TERMINAL.has(d.to)) finished = true;
          refresh();
        } else if (ev.event === 'metrics' && Array.isArray(d.points)) {
          addPoints(d.points);
        }
      },
    });
  }

  /* ---- compare --------------------------------------------------------------------------- */

  /* The parameters of a run: its labels, its --flags and its env, by name. */
  function params(job, selectorKeys) {
    const out = new Map();
    for (const [k, v] of Object.entries(job.spec.labels || {})) {
      if (!selectorKeys.has(k)) out.set(k, v);
    }
    const args = job.spec.args || [];
    for (let i = 0; i < args.length; i++) {
      const a = args[i];
      if (!a.startsWith('--') || a.length < 3) continue;
      const eq = a.indexOf('=');
      if (eq > 0) out.set(a.slice(2, eq), a.slice(eq + 1));
      else if (i + 1 < args.length && !args[i + 1].startsWith('--')) out.set(a.slice(2), args[++i]);
      else out.set(a.slice(2), 'true');
    }
    /* A secret is {"value": null, "secret": true}: its value is never shown, not even here. */
    for (const [k, v] of Object.entries(job.spec.env || {})) {
      out.set('$' + k, typeof v === 'string' ? v : '(secret)');
    }
    return out;
  }

  /* The names whose values are not the same in every run. */
  function differing(paramsList) {
    const names = new Set(paramsList.flatMap((p) => [...p.keys()]));
    return [...names].filter((n) => new Set(paramsList.map((p) => p.get(n))).size > 1).sort();
  }

  async function comparePage(page, view, qp) {
    const selector = qp.getAll('label').join(',');
    const metric = qp.get('metric') || 'loss';
    const sel = h('input', { name: 'label', class: 'wide',
      placeholder: 'label k=v, e.g. sweep=lr-grid', spellcheck: 'false' });
    sel.value = selector;
    const met = h('input', { name: 'metric', placeholder: 'metric', spellcheck: 'false' });
    met.value = metric;
    add(view, [h('h1', {}, 'Compare runs'), h('form', {
      class: 'filters',
      onsubmit: (e) => {
        e.preventDefault();
        location.hash = '#/compare?' + new URLSearchParams({ label: sel.value.trim(),
          metric: met.value.trim() || 'loss' });
      },
    }, sel, met, h('button', { type: 'submit' }, 'Compare'))]);
    if (!selector) {
      add(view, [h('p', { class: 'muted' }, 'Name a label selector: every job that has it is ' +
        'drawn on one chart, each curve named by the parameter that differs between them.')]);
      return;
    }
    const q = filtersQuery(new URLSearchParams([['label', selector]]));
    q.set('limit', String(MAX_COMPARE));
    const list = await apiJson('/v1/jobs?' + q, { signal: page.signal });
    const jobs = list.jobs.slice(0, MAX_COMPARE).reverse(); /* oldest first: stable colours */
    if (!jobs.length) {
      add(view, [h('p', { class: 'muted' }, 'No job has ' + selector + '.')]);
      return;
    }
    const keys = new Set(selector.split(/[\s,]+/).map((s) => s.split('=')[0]));
    const plist = jobs.map((j) => params(j, keys));
    const diff = differing(plist);
    const names = jobs.map((j, i) => {
      const parts = diff.map((n) => n + '=' + (plist[i].has(n) ? plist[i].get(n) : '(none)'));
      return parts.length ? parts.join(', ') : j.name;
    });
    /* Two runs with the same parameters still get two names. */
    const twice = names.map((n) => names.indexOf(n) !== names.lastIndexOf(n));
    twice.forEach((t, i) => { if (t) names[i] += ' [' + jobs[i].id.slice(-6) + ']'; });

    const series = [];
    for (let i = 0; i < jobs.length; i += 6) {
      const batch = jobs.slice(i, i + 6).map((j) => apiJson('/v1/jobs/' +
        encodeURIComponent(j.id) + '/metrics?' + new URLSearchParams({ name: metric,
        max_points: '500' }), { signal: page.signal }).then((m) => {
        const s = (m.series || []).find((x) => x.name === metric);
        return s ? s.points.map((p) => ({ x: p.step, y: p.value })) : [];
      }, (e) => { if (e instanceof AuthError) throw e; return []; }));
      series.push(...await Promise.all(batch));
    }
    const canvas = h('canvas', { id: 'chart-compare' });
    add(view, [
      h('p', {}, jobs.length + ' jobs with ' + selector +
        (list.next_page_token ? ' (the newest ' + MAX_COMPARE + ')' : '') + '; differing: ' +
        (diff.length ? diff.join(', ') : 'nothing but the name')),
      h('div', { class: 'chartbox tall' }, canvas),
      h('table', { class: 'jobs' }, h('thead', {}, h('tr', {}, ['curve', 'job', 'state',
        'points', 'last ' + metric].map((c) => h('th', {}, c)))),
      h('tbody', {}, jobs.map((j, i) => h('tr', { dataset: { id: j.id } },
        h('td', {}, h('span', { class: 'swatch c' + (i % COLORS.length) }), ' ', names[i]),
        h('td', {}, h('a', { href: jobHref(j.id) }, j.name)), h('td', {}, badge(j.state)),
        h('td', { class: 'num' }, String(series[i].length)),
        h('td', { class: 'num' }, series[i].length
          ? Number(series[i][series[i].length - 1].y).toPrecision(4) : ''))))),
    ]);
    exported.charts.compare = lineChart(page, canvas, metric, jobs.map((j, i) => ({
      label: names[i], data: series[i], borderColor: COLORS[i % COLORS.length],
      backgroundColor: COLORS[i % COLORS.length],
    })));
  }

  /* ---- sweeps ---------------------------------------------------------------------------- */

  function sweepHref(id) { return '#/sweeps/' + encodeURIComponent(id); }

  /* Trials that have ended, out of all: "4/12". */
  function sweepProgress(sw) {
    const done = ['SUCCEEDED', 'FAILED', 'CANCELLED']
      .reduce((n, s) => n + ((sw.counts || {})[s] || 0), 0);
    return done + '/' + sw.trials_total;
  }

  function fmtValue(v) {
    if (v === null || v === undefined) return '';
    return typeof v === 'number' ? String(Number(v.toPrecision(6))) : String(v);
  }

  async function sweepsPage(page, view) {
    const tbody = h('tbody');
    add(view, [h('h1', {}, 'Sweeps'),
      h('table', { class: 'jobs', id: 'sweeps' }, h('thead', {}, h('tr', {}, ['name', 'id',
        'algorithm', 'state', 'trials done', 'objective', 'created'].map((c) => h('th', {}, c)))),
      tbody)]);
    const load = async () => {
      const list = await apiJson('/v1/sweeps?limit=100', { signal: page.signal });
      tbody.replaceChildren(...list.sweeps.map((sw) => h('tr', { dataset: { id: sw.id } },
        h('td', { class: 'name' }, h('a', { href: sweepHref(sw.id) }, sw.name)),
        h('td', { class: 'id mono' }, sw.id), h('td', {}, sw.algorithm),
        h('td', {}, h('span', { class: 'badge sweep-' + sw.state }, sw.state)),
        h('td', { class: 'num' }, sweepProgress(sw)),
        h('td', {}, sw.objective.goal + ' ' + sw.objective.metric),
        h('td', { class: 'time' }, fmtTime(sw.created_at)))));
      if (!list.sweeps.length) {
        tbody.append(h('tr', {}, h('td', { colspan: '7', class: 'muted' }, 'No sweep yet.')));
      }
    };
    await load();
    page.timers.push(setInterval(() => load().catch(() => {}), 5000));
  }

  /*
   * One sweep: its trials compared on one chart of the objective's metric, each curve named by
   * the trial's parameters, and a table whose best row is marked. It is read again every few
   * seconds while trials run; a trial's curve is fetched again when its objective moved.
   */
  async function sweepPage(page, view, id) {
    const path = '/v1/sweeps/' + encodeURIComponent(id);
    let sw = await apiJson(path, { signal: page.signal });
    const metric = sw.objective.metric;
    const names = [...new Set(sw.trials.flatMap((t) => Object.keys(t.parameters)))];
    const curveName = (t) => names.map((n) => n + '=' + fmtValue(t.parameters[n])).join(', ') ||
      'trial ' + t.index;
    const summary = h('p', { id: 'sweep-summary' });
    const best = h('p', { id: 'sweep-best' });
    const tbody = h('tbody');
    const canvas = h('canvas', { id: 'chart-sweep' });
    add(view, [h('h1', {}, 'Sweep ' + sw.name), summary, best,
      h('p', {}, h('a', { href: '#/jobs?' + new URLSearchParams({ label: 'trainyard.io/sweep=' +
        sw.id }) }, 'its jobs')),
      h('div', { class: 'chartbox tall' }, canvas),
      h('table', { class: 'jobs', id: 'trials' }, h('thead', {}, h('tr', {},
        ['curve', 'trial', 'job', 'state', ...names, metric, 'at step']
          .map((c) => h('th', {}, c)))), tbody)]);
    const datasets = sw.trials.map((t, i) => ({ label: curveName(t), data: [],
      borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length] }));
    const chart = exported.charts.sweep = lineChart(page, canvas, metric, datasets);
    const seenStep = new Map();

    const fetchSeries = async (t) => {
      const m = await apiJson('/v1/jobs/' + encodeURIComponent(t.job_id) + '/metrics?' +
        new URLSearchParams({ name: metric, max_points: '500' }), { signal: page.signal });
      const s = (m.series || []).find((x) => x.name === metric);
      datasets[t.index].data = s ? s.points.map((p) => ({ x: p.step, y: p.value })) : [];
    };
    const render = async () => {
      const moved = sw.trials.filter((t) => t.objective_step !== null &&
        seenStep.get(t.index) !== t.objective_step);
      for (let i = 0; i < moved.length; i += 6) {
        await Promise.all(moved.slice(i, i + 6).map((t) => fetchSeries(t).then(() => {
          seenStep.set(t.index, t.objective_step);
        }, (e) => { if (e instanceof AuthError) throw e; })));
      }
      chart.update();
      summary.textContent = sw.state + ' · ' + sweepProgress(sw) + ' trials done · ' +
        sw.algorithm + ', ' + sw.parallelism + ' at once · ' + sw.objective.goal + ' ' + metric;
      best.textContent = sw.best ? 'Best: trial ' + sw.best.index + ' (' +
        curveName(sw.best) + '), ' + metric + ' = ' + fmtValue(sw.best.objective_value) +
        ' at step ' + sw.best.objective_step : 'Best: none yet (no trial has reported ' +
        metric + ')';
      tbody.replaceChildren(...sw.trials.map((t) => h('tr', { dataset: { trial: String(t.index),
        state: t.state }, class: sw.best && sw.best.index === t.index ? 'best' : null },
      h('td', {}, h('span', { class: 'swatch c' + (t.index % COLORS.length) })),
      h('td', { class: 'num' }, String(t.index)),
      h('td', { class: 'id mono' }, h('a', { href: jobHref(t.job_id) }, t.job_id)),
      h('td', {}, badge(t.state)),
      names.map((n) => h('td', { class: 'num' }, fmtValue(t.parameters[n]))),
      h('td', { class: 'num' }, fmtValue(t.objective_value)),
      h('td', { class: 'num' }, t.objective_step === null ? '' : String(t.objective_step)))));
    };
    await render();
    if (sw.state !== 'running') return;
    const tick = async () => {
      sw = await apiJson(path, { signal: page.signal });
      await render();
      if (sw.state !== 'running') clearInterval(timer);
    };
    const timer = setInterval(() => tick().catch(() => {}), 3000);
    page.timers.push(timer);
  }

  /* ---- teams ----------------------------------------------------------------------------- */

  const QTY_UNITS = { '': 1, m: 1e-3, k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
    Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };

  /* A Kubernetes quantity ("0.5", "500m", "4Ti") or a number as a number; NaN when neither. */
  function quantity(v) {
    if (typeof v === 'number') return v;
    const m = /^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([a-zA-Z]{0,2})$/.exec(String(v));
    return m && m[2] in QTY_UNITS ? Number(m[1]) * QTY_UNITS[m[2]] : NaN;
  }

  /*
   * A team's resources as rows: every GPU type any of its maps names, then cpu and memory.
   * A quota of null is unlimited; a quota that does not name a resource gives none of it, and
   * a borrowing limit that does not name it lets the team borrow none.
   */
  function teamRows(t) {
    const maps = [t.quota || {}, t.borrowing_limit || {}, t.usage || {}, t.borrowed || {}];
    const types = [...new Set(maps.flatMap((mp) => Object.keys(mp.gpu || {})))].sort();
    const pick = (mp, kind, type) => (mp ? (kind === 'gpu' ? (mp.gpu || {})[type] : mp[kind])
      : undefined);
    const rows = types.map((ty) => ['gpu', ty, 'gpu/' + ty]).concat([['cpu', null, 'cpu'],
      ['memory', null, 'memory']]);
    return rows.map(([kind, type, key]) => {
      const val = (mp) => pick(mp, kind, type);
      return {
        key,
        used: val(t.usage) === undefined ? '0' : String(val(t.usage)),
        quota: t.quota === null ? null : (val(t.quota) === undefined ? '0' : String(val(t.quota))),
        borrowed: val(t.borrowed) === undefined ? '0' : String(val(t.borrowed)),
        limit: val(t.borrowing_limit) === undefined ? '0' : String(val(t.borrowing_limit)),
      };
    });
  }

  /* A bar of what a team uses against its quota and what it may borrow (yellow past the quota). */
  function usageMeter(r) {
    if (r.quota === null) return h('span', { class: 'muted' }, 'no quota');
    const used = quantity(r.used), quota = quantity(r.quota), limit = quantity(r.limit);
    if (![used, quota, limit].every(Number.isFinite) || quota + limit <= 0) return null;
    return h('meter', { min: '0', max: String(quota + limit), low: String(quota),
      high: String(quota), optimum: '0', value: String(Math.min(used, quota + limit)) });
  }

  function teamPanel(t) {
    return h('section', { class: 'panel team', dataset: { team: t.name } },
      h('h2', {}, 'Team ' + t.name),
      h('p', { class: 'muted' }, 'weight ' + t.weight + ' · ',
        h('span', { class: 'count-pending' }, String(t.pending)), ' pending · ',
        h('span', { class: 'count-admitted' }, String(t.admitted)), ' admitted · ',
        t.quota === null ? 'no quota (unlimited) · ' : '', 'priority preemption ' +
        (t.priority_preemption ? 'on' : 'off')),
      h('table', { class: 'resources' }, h('thead', {}, h('tr', {}, ['resource', 'used',
        'quota', 'borrowed', 'may borrow', ''].map((c) => h('th', {}, c)))),
      h('tbody', {}, teamRows(t).map((r) => h('tr', { dataset: { resource: r.key } },
        h('td', {}, r.key), h('td', { class: 'num used' }, r.used),
        h('td', { class: 'num quota' }, r.quota === null ? 'unlimited' : r.quota),
        h('td', { class: 'num borrowed' }, r.borrowed),
        h('td', { class: 'num limit' }, r.limit),
        h('td', { class: 'bar' }, usageMeter(r)))))));
  }

  /* Every team the token may see (an admin's: all; a team's token: its own), read again while
   * the view is open. */
  async function teamsPage(page, view) {
    const box = h('div', { id: 'teams' });
    add(view, [h('h1', {}, 'Teams'), h('p', { class: 'muted' }, 'Each team\'s quota against ' +
      'what its admitted jobs use, per resource; what it borrows beyond its quota from the ' +
      'others\' idle share. A team\'s token sees its own team only.'), box]);
    const load = async () => {
      const list = await apiJson('/v1/teams', { signal: page.signal });
      box.replaceChildren(...list.teams.map(teamPanel));
      if (!list.teams.length) box.append(h('p', { class: 'muted' }, 'No team.'));
    };
    await load();
    page.timers.push(setInterval(() => load().catch(() => {}), TEAMS_POLL_MS));
  }

  /* ---- start ----------------------------------------------------------------------------- */

  document.getElementById('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const input = document.getElementById('login-token');
    const t = input.value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    input.value = '';
    route();
  });
  document.getElementById('signout').addEventListener('click', () => askToken(''));
  window.addEventListener('hashchange', route);
  route();
}());
