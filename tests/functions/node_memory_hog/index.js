'use strict';
// Allocates (and touches) event.mb MB of Buffers, outside V8's heap, or dies trying.
exports.handler = async (event) => {
  const held = [];
  for (let i = 0; i < event.mb / 16; i++) held.push(Buffer.alloc(16 << 20, 0x5a));
  return { allocated_mb: held.length * 16 };
};
