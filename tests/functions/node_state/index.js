'use strict';
// Node.js side of tests/startpaths/test_instances.py: a module-level id shows which instance served a request.
const crypto = require('crypto');

const INSTANCE_ID = crypto.randomUUID();
let count = 0;

exports.handler = async (event) => {
  count += 1;
  if (event.action === 'exit') process.exit(3);
  if (event.action === 'sleep') await new Promise((resolve) => setTimeout(resolve, event.seconds * 1000));
  return { instance: INSTANCE_ID, count };
};
