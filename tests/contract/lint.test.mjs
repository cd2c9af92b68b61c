// Redocly CLI lints the document with tests/contract/redocly.yaml: every
// problem it reports is an error.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { bin, documentPath, here } from './lib.mjs';

test('redocly lint finds no problem', () => {
  const r = spawnSync(
    bin('redocly'),
    ['lint', '--config', join(here, 'redocly.yaml'), '--format', 'stylish', documentPath],
    { encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } },
  );
  assert.equal(r.error, undefined, `cannot run redocly: ${r.error}`);
  assert.equal(r.status, 0, `redocly lint failed:\n${r.stdout}${r.stderr}`);
});
