// A .js file that is an ES module because package.json says "type": "module".
import { helper } from './lib.js';

export const handler = async (event) => ({ module: 'esm-pkg', value: helper(event.n), isEsm: typeof require === 'undefined' });
