// Where the contract tests live; no third-party imports, so that run.mjs can
// say what is missing before anything from node_modules is loaded.
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, '..', '..');
