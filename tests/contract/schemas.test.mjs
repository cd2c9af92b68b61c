// Ajv, in strict mode, compiles every schema of the document: what a strict
// OpenAPI 3.0 tool (a validator, a generator built on JSON Schema) must accept.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { loadDocument, openapiAjv, ptr } from './lib.mjs';

const doc = loadDocument();
const ajv = openapiAjv(doc);

function compile(pointer) {
  const validate = ajv.getSchema(`doc#${pointer}`);
  assert.ok(validate, `${pointer} does not resolve`);
  return validate;
}

test('every components.schemas entry compiles', () => {
  for (const name of Object.keys(doc.components.schemas)) {
    assert.doesNotThrow(() => compile(`/components/schemas/${ptr(name)}`), `schema ${name}`);
  }
});

test('every parameter, header, request body and response schema compiles', () => {
  const pointers = [];
  for (const [name, p] of Object.entries(doc.components.parameters || {})) {
    if (p.schema) pointers.push(`/components/parameters/${ptr(name)}/schema`);
  }
  for (const [name, h] of Object.entries(doc.components.headers || {})) {
    if (h.schema) pointers.push(`/components/headers/${ptr(name)}/schema`);
  }
  for (const [name, r] of Object.entries(doc.components.responses || {})) {
    for (const [h, hv] of Object.entries(r.headers || {})) {
      if (hv.schema) pointers.push(`/components/responses/${ptr(name)}/headers/${ptr(h)}/schema`);
    }
    for (const mt of Object.keys(r.content || {})) {
      pointers.push(`/components/responses/${ptr(name)}/content/${ptr(mt)}/schema`);
    }
  }
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const at = `/paths/${ptr(path)}/${method}`;
      (op.parameters || []).forEach((p, i) => {
        if (p.schema) pointers.push(`${at}/parameters/${i}/schema`);
      });
      for (const mt of Object.keys(op.requestBody?.content || {})) {
        pointers.push(`${at}/requestBody/content/${ptr(mt)}/schema`);
      }
      for (const [status, r] of Object.entries(op.responses)) {
        for (const mt of Object.keys(r.content || {})) {
          pointers.push(`${at}/responses/${status}/content/${ptr(mt)}/schema`);
        }
      }
    }
  }
  assert.ok(pointers.length > 50, `only ${pointers.length} schemas found`);
  for (const p of pointers) assert.doesNotThrow(() => compile(p), p);
});

test('every schema example conforms to its schema', () => {
  for (const [name, schema] of Object.entries(doc.components.schemas)) {
    if (schema.example === undefined) continue;
    const validate = compile(`/components/schemas/${ptr(name)}`);
    assert.ok(validate(schema.example), `${name}: ${ajv.errorsText(validate.errors)}`);
  }
});

// Values a client sees: null where the document says so, nowhere else.
const cases = [
  ['Event', { time: '2026-11-22T10:00:00.123Z', from: null, to: 'PENDING', reason: 'Submitted', message: '' }, true],
  ['Event', { time: '2026-11-22T10:00:00.123Z', from: 'PENDING', to: 'CANCELLED', reason: 'Cancelled', message: '' }, true],
  ['Event', { time: '2026-11-22T10:00:00.123Z', from: 'DONE', to: 'PENDING', reason: 'Submitted', message: '' }, false],
  ['Event', { time: '2026-11-22T10:00:00.123Z', from: null, to: null, reason: 'Submitted', message: '' }, false],
  ['Rank', { rank: 0, state: 'pending', pid: null, exit_code: null, signal: null, started_at: null, ended_at: null }, true],
  ['Rank', { rank: 0, state: 'pending', pid: null, exit_code: null, signal: null, started_at: 'soon', ended_at: null }, false],
  ['JobSpec', { name: 'a', command: ['true'], workers: { count: 1 }, labels: null, queue: null, image: null,
    args: null, env: null, resources: { cpu: null, memory: null, gpu: null },
    placement: { zone: null, capacity: null }, restart: null, volumes: null }, true],
  ['JobSpec', { name: 'a', command: ['true'], workers: { count: 1 }, queue: 'Not A Label' }, false],
  ['JobSpec', { name: 'a', command: null, workers: { count: 1 } }, false],
];

test('null is accepted exactly where the document allows it', () => {
  for (const [name, value, valid] of cases) {
    const validate = compile(`/components/schemas/${name}`);
    assert.equal(validate(value), valid, `${name} ${JSON.stringify(value)}: ${ajv.errorsText(validate.errors)}`);
  }
});
