// An ES module found by its .mjs extension.
import { basename } from 'node:path';

const loadedAt = basename(new URL(import.meta.url).pathname);

export const handler = async (event) => ({ module: 'esm-mjs', file: loadedAt, event });
