// A real `trainyard serve` (temporary data directory, loopback, jobs held
// PENDING by --queue-limit 0 except in the queue "run") behind Stoplight
// Prism's validating proxy: every operation, errors included, and each
// response must conform to openapi/openapi.yaml as Prism reads it.
//
// Prism runs without --errors, so that requests the document calls invalid
// (a bad query, a missing token) still reach the server; it reports what it
// found in the sl-violations header, request and response apart. A second
// Prism serves a copy of the document in which every JSON body schema
// requires a member the server never sends: each case must fail there, which
// shows that Prism matched the operation and checked the response.
//
// What Prism cannot route or refuses to forward (a method a path does not
// have, a body that is not JSON, a request line or headers too large for
// Prism itself, a request that never ends) goes to the server directly and
// is checked against the document with Ajv. The 408 case has a server of its
// own, with a one-second request deadline.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { bin, documentPath, loadDocument, openapiAjv, ptr, repo } from './lib.mjs';

const ADMIN = 'ty_' + 'A'.repeat(43);
const doc = loadDocument();
const ajv = openapiAjv(doc);
const children = [];
let work, server, prism, prismCheck;

const serverBinary = process.env.TRAINYARD_BIN || join(repo, 'build', 'bin', 'trainyard');

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/* Starts a child; resolves with what match() returns for the first output line it accepts. */
function start(name, cmd, args, match, env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let output = '';
    let done = false;
    const timer = setTimeout(() => finish(new Error(`${name} did not start in 60 s:\n${output}`)), 60000);
    function finish(err, value) {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(value);
    }
    const onData = (chunk) => {
      output += chunk;
      for (const line of output.split('\n')) {
        const v = match(line);
        if (v) finish(null, v);
      }
      if (output.length > 1 << 20) output = output.slice(-4096);
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.stderr.setEncoding('utf8').on('data', onData);
    child.once('error', (e) => finish(new Error(`${name}: ${e.message}`)));
    child.once('exit', (code, sig) => finish(new Error(`${name} exited (${code ?? sig}):\n${output}`)));
  });
}

/* The document with a member no response has required by every JSON body schema. */
function poisonedDocument() {
  const copy = structuredClone(doc);
  const poison = (schema) => {
    if (schema?.$ref) {
      const name = schema.$ref.split('/').pop();
      schema = copy.components.schemas[name];
    }
    if (schema && schema.type === 'object' && !schema['x-poisoned']) {
      schema.required = [...(schema.required || []), 'never_sent'];
      schema['x-poisoned'] = true;
    }
  };
  const visitResponse = (r) => {
    if (r.$ref) r = copy.components.responses[r.$ref.split('/').pop()];
    for (const [mt, m] of Object.entries(r.content || {})) if (/json/.test(mt)) poison(m.schema);
  };
  for (const item of Object.values(copy.paths)) {
    for (const op of Object.values(item)) for (const r of Object.values(op.responses)) visitResponse(r);
  }
  return copy;
}

/* Starts `trainyard serve` on a free loopback port with a database in dir; resolves with its address. */
function serve(dir, ...flags) {
  return start(
    'trainyard serve',
    serverBinary,
    ['serve', '--listen', '127.0.0.1:0', '--db', join(dir, 'trainyard.db'), ...flags],
    (line) => {
      try {
        const j = JSON.parse(line);
        return j.msg === 'listening' ? j.addr : null;
      } catch {
        return null;
      }
    },
    { TRAINYARD_ADMIN_TOKEN: ADMIN, TRAINYARD_LOG_LEVEL: 'info' },
  );
}

before(async () => {
  assert.ok(existsSync(serverBinary), `no trainyard binary at ${serverBinary} (set TRAINYARD_BIN)`);
  work = mkdtempSync(join(tmpdir(), 'trainyard-contract-'));
  const addr = await serve(join(work, 'data'),
    '--queue-limit', '0', '--queue-limit', 'run=unlimited', '--max-body', '65536', '--local-slots', '2');
  server = `http://${addr}`;
  const poisoned = join(work, 'poisoned.json');
  writeFileSync(poisoned, JSON.stringify(poisonedDocument()));
  const [p1, p2] = await Promise.all([freePort(), freePort()]);
  const listening = (port) => (line) => (line.includes(`listening on http://127.0.0.1:${port}`) ? true : null);
  await Promise.all([
    start('prism', bin('prism'), ['proxy', documentPath, server, '--host', '127.0.0.1', '--port', String(p1)], listening(p1)),
    start('prism (poisoned)', bin('prism'), ['proxy', poisoned, server, '--host', '127.0.0.1', '--port', String(p2)], listening(p2)),
  ]);
  prism = `http://127.0.0.1:${p1}`;
  prismCheck = `http://127.0.0.1:${p2}`;
});

after(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  if (work) rmSync(work, { recursive: true, force: true });
});

/* One HTTP exchange with node:http (no client-side limits or rewriting). */
function exchange(base, method, path, { token, body, contentType, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (token) h.Authorization = `Bearer ${token}`;
    if (body !== undefined) {
      h['Content-Type'] = contentType || 'application/json';
      if (typeof body !== 'string' && !Buffer.isBuffer(body)) body = JSON.stringify(body);
      h['Content-Length'] = Buffer.byteLength(body);
    }
    const req = httpRequest(`${base}${path}`, { method, headers: h, maxHeaderSize: 65536 }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        const v = res.headers['sl-violations'];
        resolve({ status: res.statusCode, headers: res.headers, text, json, violations: v ? JSON.parse(v) : [] });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

const show = (r) => `${r.status} ${r.text.slice(0, 600)}\nviolations: ${JSON.stringify(r.violations)}`;

/*
 * Sends the request through Prism and asserts that the response conforms.
 * requestValid: true, the request conforms too (no violation at all); false,
 * Prism finds the request invalid; null, either (the document cannot say,
 * e.g. a state name that is not one). Returns the response.
 */
async function call(method, path, opts = {}, { requestValid = true } = {}) {
  const r = await exchange(prism, method, path, opts);
  const response = r.violations.filter((v) => v.location?.[0] === 'response');
  assert.deepEqual(response, [], `${method} ${path}: the response violates the document:\n${show(r)}`);
  assert.ok(!r.violations.some((v) => /route not found|no method matched/i.test(v.message)),
    `${method} ${path}: Prism matched no operation:\n${show(r)}`);
  if (requestValid === true) assert.deepEqual(r.violations, [], `${method} ${path}: ${show(r)}`);
  if (requestValid === false) {
    assert.ok(r.violations.length > 0, `${method} ${path}: the request should violate the document: ${show(r)}`);
  }
  if (/json/.test(r.headers['content-type'] || '')) {
    // Same request to the poisoned document: Prism must have checked this body.
    // (Successful changes are not repeated; their body schemas are covered by GETs.)
    if (method === 'GET' || r.status >= 400) {
      const p = await exchange(prismCheck, method, path, opts);
      assert.ok(p.violations.some((v) => v.location?.[0] === 'response' && /never_sent/.test(v.message)),
        `${method} ${path}: Prism did not check the response body:\n${show(p)}`);
    }
  }
  return r;
}

/* Checks a response Prism cannot route against the responses the document gives that path. */
function checkDirect(method, path, r) {
  const template = Object.keys(doc.paths)
    .filter((t) => new RegExp(`^${t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`).test(path.split('?')[0]))
    .sort((a, b) => b.replace(/\{[^}]+\}/g, '').length - a.replace(/\{[^}]+\}/g, '').length)[0];
  assert.ok(template, `${path}: no documented path`);
  const found = Object.entries(doc.paths[template]).find(([, op]) => op.responses[String(r.status)]);
  assert.ok(found, `${method} ${path}: status ${r.status} is documented under no operation of ${template}`);
  const [opMethod, op] = found;
  let response = op.responses[String(r.status)];
  let at = `/paths/${ptr(template)}/${opMethod}/responses/${r.status}`;
  if (response.$ref) {
    at = response.$ref.slice(1);
    response = doc.components.responses[response.$ref.split('/').pop()];
  }
  const ct = (r.headers['content-type'] || '').split(';')[0].trim().toLowerCase();
  assert.ok(response.content?.[ct], `${method} ${path} ${r.status}: content type '${ct}' is not documented:\n${show(r)}`);
  const validate = ajv.getSchema(`doc#${at}/content/${ptr(ct)}/schema`);
  assert.ok(validate(r.json), `${method} ${path} ${r.status}: ${ajv.errorsText(validate.errors)}\n${show(r)}`);
  for (const [name, h] of Object.entries(response.headers || {})) {
    const spec = h.$ref ? doc.components.headers[h.$ref.split('/').pop()] : h;
    const value = r.headers[name.toLowerCase()];
    if (spec.required) assert.ok(value !== undefined, `${method} ${path} ${r.status}: header ${name} is missing`);
    if (value !== undefined) {
      const hv = ajv.compile(spec.schema);
      assert.ok(hv(spec.schema.type === 'integer' ? Number(value) : value), `header ${name}: ${value}`);
    }
  }
  return r;
}

const job = (name, extra = {}) => ({ name, command: ['sh', '-c', 'echo hello from rank $RANK'], workers: { count: 1 }, ...extra });
const paths = (r) => r.json.errors.map((e) => e.path);

async function waitForState(id, states) {
  for (let i = 0; i < 300; i++) {
    const r = await exchange(server, 'GET', `/v1/jobs/${id}`, { token: ADMIN });
    if (states.includes(r.json.state)) return r.json;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.fail(`job ${id} never reached ${states}`);
}

test('operations endpoints', async () => {
  assert.equal((await call('GET', '/healthz')).json.status, 'ok');
  assert.equal((await call('GET', '/readyz')).json.status, 'ready');
  assert.match((await call('GET', '/metrics')).text, /trainyard_http_requests_total/);
  assert.match((await call('GET', '/openapi.yaml')).text, /^openapi: 3\.0/);
});

test('tokens: create, list, conflicts, revoke, and what the scopes allow', async () => {
  const created = await call('POST', '/v1/tokens', { token: ADMIN, body: { name: 'reader', scopes: ['read'] } });
  assert.equal(created.status, 201);
  const reader = created.json.token;
  const list = await call('GET', '/v1/tokens', { token: ADMIN });
  assert.deepEqual(list.json.tokens.map((t) => t.name).sort(), ['admin', 'reader']);
  const again = await call('POST', '/v1/tokens', { token: ADMIN, body: { name: 'reader', scopes: ['read'] } });
  assert.equal(again.status, 409);
  assert.equal(again.json.code, 'token-exists');
  const bad = await call('POST', '/v1/tokens', { token: ADMIN, body: { name: '-x-', scopes: ['root'], extra: 1 } },
    { requestValid: false });
  assert.equal(bad.status, 422);
  assert.deepEqual(paths(bad).sort(), ['$.extra', '$.name', '$.scopes[0]']);
  const forbidden = await call('POST', '/v1/jobs', { token: reader, body: job('x') });
  assert.equal(forbidden.status, 403);
  assert.equal(forbidden.json.code, 'forbidden');
  assert.equal((await call('GET', '/v1/jobs', { token: reader })).status, 200);
  const me = await call('GET', '/v1/whoami', { token: reader });
  assert.deepEqual(me.json, { name: 'reader', scopes: ['read'], team: 'default' });
  assert.deepEqual((await call('GET', '/v1/whoami', { token: ADMIN })).json.scopes, ['admin']);
  assert.equal((await call('DELETE', '/v1/tokens/reader', { token: ADMIN })).status, 204);
  const gone = await call('DELETE', '/v1/tokens/nobody', { token: ADMIN });
  assert.equal(gone.status, 404);
  assert.equal(gone.json.code, 'token-not-found');
  const revoked = await call('GET', '/v1/jobs', { token: reader }, { requestValid: true });
  assert.equal(revoked.status, 401);
});

test('authentication errors', async () => {
  const none = await call('GET', '/v1/jobs', {}, { requestValid: false });
  assert.equal(none.status, 401);
  assert.equal(none.headers['www-authenticate'], 'Bearer');
  const wrong = await call('GET', '/v1/jobs', { token: 'ty_' + 'B'.repeat(43) });
  assert.equal(wrong.status, 401);
  assert.equal(wrong.json.code, 'unauthorized');
});

test('submit one job, replays, its history, attempts, logs and cancel', async () => {
  const key = { 'Idempotency-Key': 'contract-1' };
  const first = await call('POST', '/v1/jobs', { token: ADMIN, body: job('one'), headers: key });
  assert.equal(first.status, 201);
  const id = first.json.id;
  assert.equal(first.headers.location, `/v1/jobs/${id}`);
  assert.equal(first.json.state, 'PENDING');
  assert.equal(first.json.current_attempt, null);
  const replay = await call('POST', '/v1/jobs', { token: ADMIN, body: job('one'), headers: key });
  assert.equal(replay.status, 200);
  assert.equal(replay.json.id, id);
  const reused = await call('POST', '/v1/jobs', { token: ADMIN, body: job('two'), headers: key });
  assert.equal(reused.status, 409);
  assert.equal(reused.json.code, 'idempotency-key-reused');

  assert.equal((await call('GET', `/v1/jobs/${id}`, { token: ADMIN })).json.id, id);
  // The first event goes from null: what every client of this route receives.
  const events = await call('GET', `/v1/jobs/${id}/events`, { token: ADMIN });
  assert.deepEqual(events.json.events.map((e) => [e.from, e.to, e.reason]), [[null, 'PENDING', 'Submitted']]);
  assert.deepEqual((await call('GET', `/v1/jobs/${id}/attempts`, { token: ADMIN })).json, { attempts: [] });
  const nolog = await call('GET', `/v1/jobs/${id}/logs`, { token: ADMIN });
  assert.equal(nolog.status, 404);
  assert.equal(nolog.json.code, 'log-not-found');
  const badrank = await call('GET', `/v1/jobs/${id}/logs?rank=-1&follow=maybe`, { token: ADMIN }, { requestValid: false });
  assert.equal(badrank.status, 400);
  assert.deepEqual(paths(badrank).sort(), ['query.follow', 'query.rank']);

  const cancelled = await call('POST', `/v1/jobs/${id}:cancel`, { token: ADMIN });
  assert.equal(cancelled.status, 200);
  assert.equal(cancelled.json.state, 'CANCELLED');
  assert.equal((await call('POST', `/v1/jobs/${id}:cancel`, { token: ADMIN })).json.state, 'CANCELLED');
  const history = await call('GET', `/v1/jobs/${id}/events`, { token: ADMIN });
  assert.deepEqual(history.json.events.map((e) => e.from), [null, 'PENDING']);
});

test('a job that ran: attempts, ranks, its log, and cancel after the end', async () => {
  const r = await call('POST', '/v1/jobs', { token: ADMIN, body: job('ran', { queue: 'run' }) });
  assert.equal(r.status, 201);
  const id = r.json.id;
  await waitForState(id, ['SUCCEEDED', 'FAILED']);
  const got = await call('GET', `/v1/jobs/${id}`, { token: ADMIN });
  assert.equal(got.json.state, 'SUCCEEDED', JSON.stringify(got.json.current_attempt));
  assert.equal(got.json.current_attempt.ranks[0].exit_code, 0);
  const attempts = await call('GET', `/v1/jobs/${id}/attempts`, { token: ADMIN });
  assert.equal(attempts.json.attempts.length, 1);
  assert.equal(attempts.json.attempts[0].state, 'succeeded');
  const log = await call('GET', `/v1/jobs/${id}/logs?rank=0&attempt=1`, { token: ADMIN });
  assert.equal(log.status, 200);
  assert.equal(log.text, 'hello from rank 0\n');
  const tail = await call('GET', `/v1/jobs/${id}/logs?rank=0&tail=1`, { token: ADMIN });
  assert.equal(tail.text, 'hello from rank 0\n');
  const events = await call('GET', `/v1/jobs/${id}/events`, { token: ADMIN });
  assert.equal(events.json.events.at(-1).to, 'SUCCEEDED');
  const finished = await call('POST', `/v1/jobs/${id}:cancel`, { token: ADMIN });
  assert.equal(finished.status, 409);
  assert.equal(finished.json.code, 'job-finished');
  assert.equal(finished.json.state, 'SUCCEEDED');
});

test('submission errors name the fields', async () => {
  const invalid = await call('POST', '/v1/jobs',
    { token: ADMIN, body: { name: 'Bad Name', command: [], workers: { count: 0 }, labels: { team: 'a b' } } },
    { requestValid: false });
  assert.equal(invalid.status, 422);
  assert.equal(invalid.json.code, 'invalid-spec');
  assert.deepEqual(paths(invalid).sort(), ['$.command', '$.labels.team', '$.name', '$.workers.count']);
  // Prism answers a body that is not JSON itself: this one goes to the server.
  const malformed = checkDirect('POST', '/v1/jobs', await exchange(server, 'POST', '/v1/jobs', { token: ADMIN, body: '{"name": ' }));
  assert.equal(malformed.status, 400);
  assert.equal(malformed.json.code, 'malformed-json');
  assert.deepEqual(paths(malformed), ['$']);
  const text = await call('POST', '/v1/jobs', { token: ADMIN, body: 'name=x', contentType: 'text/plain' },
    { requestValid: false });
  assert.equal(text.status, 415);
  const big = await call('POST', '/v1/jobs', { token: ADMIN, body: JSON.stringify(job('big', { args: ['x'.repeat(70000)] })) },
    { requestValid: false });
  assert.equal(big.status, 413);
  assert.equal(big.json.code, 'body-too-large');
});

test('batches', async () => {
  const ok = await call('POST', '/v1/jobs:batch', { token: ADMIN, body: { jobs: [job('b1'), job('b2')] } });
  assert.equal(ok.status, 201);
  assert.deepEqual(ok.json.jobs.map((j) => j.name), ['b1', 'b2']);
  const bad = await call('POST', '/v1/jobs:batch', { token: ADMIN, body: { jobs: [job('b3'), job('b4', { image: 'has space' })] } },
    { requestValid: false });
  assert.equal(bad.status, 422);
  assert.deepEqual(paths(bad), ['$.jobs[1].image']);
});

test('listing: filters, pages and query errors', async () => {
  await call('POST', '/v1/jobs', { token: ADMIN, body: job('l1', { labels: { sweep: 'lr' } }) });
  await call('POST', '/v1/jobs', { token: ADMIN, body: job('l2', { labels: { sweep: 'lr' } }) });
  const repeated = await call('GET', '/v1/jobs?state=PENDING&state=cancelled', { token: ADMIN });
  assert.ok(repeated.json.jobs.some((j) => j.state === 'CANCELLED'));
  assert.ok(repeated.json.jobs.some((j) => j.state === 'PENDING'));
  const commas = await call('GET', '/v1/jobs?state=PENDING,CANCELLED', { token: ADMIN });
  assert.deepEqual(commas.json.jobs.map((j) => j.id), repeated.json.jobs.map((j) => j.id));
  const labelled = await call('GET', '/v1/jobs?label=sweep=lr&limit=1', { token: ADMIN });
  assert.equal(labelled.json.jobs[0].name, 'l2');
  assert.ok(labelled.json.next_page_token);
  const next = await call('GET', `/v1/jobs?label=sweep=lr&limit=1&page_token=${labelled.json.next_page_token}`, { token: ADMIN });
  assert.equal(next.json.jobs[0].name, 'l1');

  const limit = await call('GET', '/v1/jobs?limit=0', { token: ADMIN }, { requestValid: false });
  assert.equal(limit.status, 400);
  assert.equal(limit.json.code, 'invalid-query');
  assert.deepEqual(paths(limit), ['query.limit']);
  const state = await call('GET', '/v1/jobs?state=DONE', { token: ADMIN }, { requestValid: null });
  assert.deepEqual(paths(state), ['query.state']);
  // One bad label filter given many times is one error.
  const labels = await call('GET', `/v1/jobs?${Array(50).fill('label=no-equals-sign').join('&')}`, { token: ADMIN });
  assert.equal(labels.status, 400);
  assert.equal(labels.json.errors.length, 1, JSON.stringify(labels.json));
  assert.equal(labels.json.detail, '1 error in the request');
});

test('a job that does not exist', async () => {
  for (const path of ['', '/events', '/attempts', '/logs']) {
    const r = await call('GET', `/v1/jobs/${'0'.repeat(26)}${path}`, { token: ADMIN });
    assert.equal(r.status, 404);
    assert.equal(r.json.code, 'job-not-found');
  }
  const cancel = await call('POST', `/v1/jobs/${'0'.repeat(26)}:cancel`, { token: ADMIN });
  assert.equal(cancel.status, 404);
});

test('a method the path does not have: 405 with Allow', async () => {
  for (const [method, path, allow] of [['DELETE', '/v1/jobs', 'GET, POST'], ['PUT', `/v1/jobs/${'0'.repeat(26)}`, 'GET'],
    ['GET', '/v1/jobs:batch', 'POST'], ['POST', '/healthz', 'GET']]) {
    const r = checkDirect(method, path, await exchange(server, method, path, { token: ADMIN }));
    assert.equal(r.status, 405);
    assert.equal(r.json.code, 'method-not-allowed');
    assert.equal(r.headers.allow, allow);
  }
});

test('a request target or header fields too large: 414 and 431', async () => {
  const uri = checkDirect('GET', '/v1/jobs', await exchange(server, 'GET', `/v1/jobs?name_prefix=${'a'.repeat(9000)}`, { token: ADMIN }));
  assert.equal(uri.status, 414);
  assert.equal(uri.json.code, 'uri-too-long');
  const headers = checkDirect('GET', '/v1/jobs',
    await exchange(server, 'GET', '/v1/jobs', { token: ADMIN, headers: { 'X-Padding': 'p'.repeat(20000) } }));
  assert.equal(headers.status, 431);
  assert.equal(headers.json.code, 'headers-too-large');
});

test('a request not received in time: 408', async () => {
  // A server of its own, with a one-second deadline for receiving a request.
  const addr = await serve(join(work, 'deadline'), '--request-deadline', '1', '--queue-limit', '0');
  const [host, port] = addr.split(':');
  const raw = await new Promise((resolve, reject) => {
    const sock = connect(Number(port), host, () => sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n'));
    const chunks = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    sock.setTimeout(15000, () => sock.destroy(new Error('no answer within 15 s')));
  });
  const [head, ...rest] = raw.split('\r\n\r\n');
  const [statusLine, ...headerLines] = head.split('\r\n');
  const headers = Object.fromEntries(headerLines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  const text = rest.join('\r\n\r\n');
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  const r = checkDirect('GET', '/healthz', { status: Number(statusLine.split(' ')[1]), headers, text, json, violations: [] });
  assert.equal(r.status, 408);
  assert.equal(r.json.code, 'request-timeout');
});
