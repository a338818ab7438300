'use strict';
// CommonJS handlers of tests/lambda/test_runtimes.py.
const ENV_NAMES = ['AWS_LAMBDA_FUNCTION_NAME', '_HANDLER', 'LAMBDA_TASK_ROOT', 'AWS_REGION',
  'AWS_LAMBDA_FUNCTION_MEMORY_SIZE', 'AWS_LAMBDA_FUNCTION_VERSION', 'AWS_EXECUTION_ENV', 'KILN_SHIM_FD'];

exports.asyncHandler = async (event) => {
  await new Promise((resolve) => setTimeout(resolve, 10));
  return { kind: 'async', event };
};

exports.callbackHandler = (event, context, callback) => {
  setTimeout(() => callback(null, { kind: 'callback', event }), 10);
};

exports.context = async (event, context) => ({
  awsRequestId: context.awsRequestId,
  functionName: context.functionName,
  invokedFunctionArn: context.invokedFunctionArn,
  memoryLimitInMB: context.memoryLimitInMB,
  remaining: context.getRemainingTimeInMillis(),
  cwd: process.cwd(),
  env: Object.fromEntries(ENV_NAMES.map((n) => [n, process.env[n] === undefined ? null : process.env[n]])),
});

exports.fails = async () => {
  throw new TypeError('kaboom from node');
};

exports.logs = async (event, context) => {
  console.log('node log line one', event.tag);
  console.error('node error line two', event.tag);
  process.stdout.write(`raw stdout ${event.tag}\n`);
  return 'logged';
};

// An exception thrown outside the handler's promise, while the invocation is in flight.
exports.asyncThrow = (event, context, callback) => {
  setTimeout(() => { throw new RangeError('async boom'); }, 5);
};

exports.chatty = async (event) => {
  for (let i = 0; i < event.lines; i++) console.log(`chatty line ${String(i).padStart(6, '0')} ${'x'.repeat(100)}`);
  return { lines: event.lines };
};

// Threads and child processes: what a runtime needs from the system-call filter.
exports.spawns = async () => {
  const { execFileSync } = require('child_process');
  const { Worker } = require('worker_threads');
  const child = execFileSync('/bin/sh', ['-c', 'echo from-child $$'], { encoding: 'utf8' }).trim();
  const fromWorker = await new Promise((resolve, reject) => {
    const worker = new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  const data = await require('fs').promises.readFile('/var/task/index.js', 'utf8');
  return { child: child.startsWith('from-child '), fromWorker, readAsync: data.length > 0 };
};
