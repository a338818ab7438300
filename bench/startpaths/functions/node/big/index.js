'use strict';
// Big: requires about 41 MB of generated dependencies (./bigdeps) at init.
const bigdeps = require('./bigdeps');

exports.handler = async (event) => {
  if (event && event.hold_ms) await new Promise((r) => setTimeout(r, event.hold_ms));
  return { modules: bigdeps.MODULES };
};
