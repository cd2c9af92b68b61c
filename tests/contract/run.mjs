// Runs the contract tests (node --test) after checking that `npm ci` has
// installed exactly what package-lock.json names. ctest runs this with
// TRAINYARD_BIN set to the trainyard binary it built.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { here } from './paths.mjs';

function fail(message) {
  console.error(`tests/contract: ${message}`);
  process.exit(1);
}

const installed = join(here, 'node_modules', '.package-lock.json');
if (!existsSync(installed)) {
  fail('node_modules is missing: run scripts/install-deps, or `npm ci` in tests/contract');
}
const want = JSON.parse(readFileSync(join(here, 'package-lock.json'), 'utf8')).packages;
const have = JSON.parse(readFileSync(installed, 'utf8')).packages;
for (const [path, meta] of Object.entries(want)) {
  if (path && !meta.optional && have[path]?.version !== meta.version) {
    fail(`${path} is ${have[path]?.version ?? 'missing'}, package-lock.json wants ${meta.version}: ` +
      'run scripts/install-deps, or `npm ci` in tests/contract');
  }
}

const files = ['lint.test.mjs', 'schemas.test.mjs', 'responses.test.mjs'].map((f) => join(here, f));
const r = spawnSync(process.execPath, ['--test', ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
