// Shared by the contract tests: where things are, the document, and Ajv set up
// for OpenAPI 3.0 schemas.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import yaml from 'js-yaml';

import { here, repo } from './paths.mjs';

export { here, repo };
export const documentPath = process.env.TRAINYARD_OPENAPI || join(repo, 'openapi', 'openapi.yaml');
export const bin = (name) => join(here, 'node_modules', '.bin', name);

export function loadDocument() {
  return yaml.load(readFileSync(documentPath, 'utf8'), { schema: yaml.CORE_SCHEMA });
}

/*
 * Ajv in strict mode, which is what makes it an OpenAPI 3.0 checker worth
 * having: it refuses unknown keywords, `nullable` without `type`, and
 * keywords that do not apply to the declared type. OpenAPI 3.0's own
 * annotations (example, externalDocs, xml, x-*) are declared as such. The
 * whole document is added under the id "doc", so that "#/components/..."
 * references resolve as they do in the document.
 */
export function openapiAjv(doc) {
  const ajv = new Ajv({ strict: true, allErrors: true, discriminator: true });
  addFormats(ajv);
  // OpenAPI 3.0 formats that JSON Schema does not define (informational).
  for (const f of ['int32', 'int64', 'float', 'double', 'byte', 'binary', 'password']) {
    if (!ajv.formats[f]) ajv.addFormat(f, true);
  }
  for (const k of ['example', 'externalDocs', 'xml']) ajv.addKeyword(k);
  const extensions = new Set();
  (function collect(v) {
    if (Array.isArray(v)) return v.forEach(collect);
    if (v && typeof v === 'object') {
      for (const [k, sub] of Object.entries(v)) {
        if (k.startsWith('x-')) extensions.add(k);
        collect(sub);
      }
    }
  })(doc.components);
  for (const k of extensions) ajv.addKeyword(k);
  // The document's top-level members are not schema keywords.
  for (const k of ['openapi', 'info', 'servers', 'security', 'tags', 'paths', 'components']) {
    if (!ajv.getKeyword(k)) ajv.addKeyword(k);
  }
  ajv.addSchema({ ...doc, $id: 'doc' });
  return ajv;
}

/* A JSON Pointer fragment for one member name. */
export const ptr = (name) => String(name).replace(/~/g, '~0').replace(/\//g, '~1');
