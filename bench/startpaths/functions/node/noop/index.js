'use strict';
// NoOp: no dependencies, no work; the baseline of every start path.
// {"hold_ms": N} keeps the instance busy (the memory phase); measured invocations send {}.
exports.handler = async (event) => {
  if (event && event.hold_ms) await new Promise((r) => setTimeout(r, event.hold_ms));
  return {};
};
