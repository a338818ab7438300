'use strict';
/*
 * kiln BREAKOUT tracing runtime for Node.js 20: the runtime system of "A Language-based Serverless Function
 * Accelerator" (Herbert and Guha), Figs. 4, 6 and 8. Load it before the instrumented code
 * (`node --require /opt/kiln/breakout.js …`); it installs itself as `globalThis.__kilnBreakout`, which every
 * file instrumented by kiln-breakout reads (crates/kiln-breakout/src/instrument).
 *
 * The trace tree grows as the instrumented code runs. A *zipper* is the paper's (c, κ): a stack of frames,
 * each a body (an array of trace nodes) with a cursor into it; the node at the top frame's cursor is c, the
 * frames below are κ. α, the argument stack, is the pending call a function's entry consumes (`c` then `en`).
 * Each handler (Fig. 8) has a tree and, while it runs, a zipper of its own: the module's top level, the
 * function the platform calls per request, a callback a built-in calls, an async function (its call is an
 * event whose handler is the function). `await` suspends the current handler's zipper and resumes it after.
 *
 * Tracing never changes what the program does: the runtime only reads the values it is given, for their
 * types, and never stores a value. The tree holds quoted code (built when the file was instrumented), node
 * kinds, types, function ids and ☠ reasons with source positions. docs/breakout.md defines its JSON.
 *
 * Only Node built-ins are used. When KILN_BREAKOUT_DUMP names a file, the tree is written there at exit.
 */

const TRACE_VERSION = 1;
// A tree this large stops growing (the rest of a request is left untraced, a ☠ in the compiled code).
const MAX_NODES = 200000;

const unknown = () => ({ kind: 'unknown' });
const TERMINAL = new Set(['break', 'return', 'throw', 'unsupported']);

function typeOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  const type = typeof value;
  if (type === 'number') return Number.isInteger(value) && Math.abs(value) < 2 ** 31 ? 'int' : 'number';
  if (type === 'object' && value instanceof Promise) return 'promise';
  return type;
}

function addType(node, value) {
  const type = typeOf(value);
  if (!node.types) node.types = [];
  if (!node.types.includes(type)) {
    node.types.push(type);
    node.types.sort();
  }
}

/** A property's value if it is a data property on the object or its prototypes; never runs a getter. */
function lookup(object, key) {
  if (object === null || object === undefined) return undefined;
  let target = Object(object);
  for (let depth = 0; target !== null && depth < 64; depth += 1) {
    const descriptor = Object.getOwnPropertyDescriptor(target, key);
    if (descriptor) return 'value' in descriptor ? descriptor.value : undefined;
    target = Object.getPrototypeOf(target);
  }
  return undefined;
}

/**
 * The intrinsic a callee is, if any: a call whose effects are the platform's (the function's log, the clock,
 * randomness, the object store). Compared by identity with what the globals hold now, as the shim replaces
 * `console`'s methods after this file loads; an S3 client's `send` by its receiver's constructor's name, read
 * without running a getter. kiln-breakout's trace::INTRINSICS lists the same names.
 */
function intrinsicName(callee, isNew, object, key) {
  if (typeof callee !== 'function') return undefined;
  if (!isNew && key === 'send' && object !== null && typeof object === 'object') {
    const constructor = lookup(object, 'constructor');
    if (typeof constructor === 'function' && lookup(constructor, 'name') === 'S3Client') {
      return 'S3Client.prototype.send';
    }
  }
  if (isNew) return callee === Date ? 'Date' : undefined;
  for (const method of ['log', 'info', 'warn', 'error']) {
    if (callee === console[method]) return `console.${method}`;
  }
  if (callee === Date.now) return 'Date.now';
  if (callee === Math.random) return 'Math.random';
  return undefined;
}

// The quoted statement a node was made from, kept off the JSON (a node is matched to it on later runs).
const origin = new WeakMap();

class Zipper {
  constructor(handler, detached) {
    this.handler = handler;
    this.frames = [{ body: handler.body, index: 0 }];
    // The calls in progress, innermost last: α of Fig. 6 (each callee's trace and its arguments'),
    // consumed by the callee's entry when it is traced inline.
    this.calls = [];
    this.detached = detached;
    this.state = 'active';
  }

  top() {
    return this.frames[this.frames.length - 1];
  }
}

class Tracer {
  constructor() {
    this.handlers = [];
    this.byFunction = new Map();
    this.functions = new WeakMap();
    // The call nodes that have run at least once (an intrinsic is marked on the first run only).
    this.called = new WeakSet();
    this.nodes = 0;
    this.conflicts = [];
    this.idle = new Zipper({ id: -1, fn: 'idle', body: [unknown()] }, true);
    this.cur = this.idle;
    this.outer = [];
  }

  // ------------------------------------------------------------------------------------------ the cursor
  /** The node at the cursor for `q`, made if the slot is unknown; null when it cannot be placed. */
  place(q, make) {
    const z = this.cur;
    if (z.detached) return null;
    const frame = z.top();
    if (frame.terminated) return null;
    const body = frame.body;
    const existing = body[frame.index];
    let node;
    if (existing === undefined || existing.kind === 'unknown') {
      if (this.nodes >= MAX_NODES) {
        this.conflict('the trace reached its size limit');
        return null;
      }
      node = make();
      origin.set(node, q);
      this.nodes += 1;
      body[frame.index] = node;
      if (!TERMINAL.has(node.kind) && frame.index === body.length - 1) body.push(unknown());
      if (TERMINAL.has(node.kind)) body.length = frame.index + 1;
    } else if (origin.get(existing) === q) {
      node = existing;
    } else {
      this.conflict(`two statements at one place of the tree (${existing.kind} and ${q.kind})`);
      return null;
    }
    frame.index += 1;
    if (TERMINAL.has(node.kind)) frame.terminated = true;
    return node;
  }

  /** A path the tree cannot hold (a polymorphic call, say): the rest of this run is not traced. */
  conflict(reason) {
    if (this.conflicts.length < 100) this.conflicts.push(reason);
    this.cur.detached = true;
  }

  push(body) {
    this.cur.frames.push({ body, index: 0 });
  }

  /** A body left normally: the unknown at its end, if the cursor reached it, goes (the path is known). */
  complete(frame) {
    const body = frame.body;
    if (frame.index === body.length - 1 && body[frame.index].kind === 'unknown') body.pop();
  }

  popTo(depth, completing) {
    const frames = this.cur.frames;
    while (frames.length > depth && frames.length > 1) {
      const frame = frames.pop();
      if (completing) this.complete(frame);
    }
  }

  // ------------------------------------------------------------------------------------------ leaves
  /** `let`, assignment, expression statement, with the value's type. */
  l(q, value) {
    const node = this.place(q, () => ({ kind: q.kind, bind: q.bind, value: q.value }));
    if (node && arguments.length > 1) addType(node, value);
  }

  /** A closure bound: its function is recorded so a call to it can be inlined. */
  f(q, fn) {
    if (typeof fn === 'function') this.functions.set(fn, { id: q.value.fn, async: q.value.async });
    this.place(q, () => ({ kind: 'let', bind: q.bind, value: q.value }));
  }

  /** A closure stored in a property: recorded as `f` does, and returned. */
  fv(q, fn) {
    this.f(q, fn);
    return fn;
  }

  b(q) {
    this.place(q, () => ({ kind: 'break', label: q.label }));
  }

  rt(q, value) {
    const node = this.place(q, () => ({ kind: 'return', value: q.value }));
    if (node && arguments.length > 1) addType(node, value);
  }

  th(q) {
    this.place(q, () => ({ kind: 'throw', value: q.value }));
  }

  /** ☠: a construct outside the subset ran. Nothing after it in this run is traced. */
  u(q) {
    this.place(q, () => ({ kind: 'unsupported', reason: q.reason, at: q.at }));
    this.cur.detached = true;
  }

  // ------------------------------------------------------------------------------------------ interior nodes
  mk() {
    return { z: this.cur, depth: this.cur.frames.length, calls: this.cur.calls.length };
  }

  x(k) {
    if (k && this.cur === k.z) {
      this.popTo(k.depth, true);
      k.z.calls.length = Math.min(k.z.calls.length, k.calls);
    }
  }

  t(q) {
    const node = this.place(q, () => ({ kind: 'if', test: q.test, then: null, else: null }));
    if (node) this.push((node.then ??= [unknown()]));
  }

  e(q) {
    const node = this.place(q, () => ({ kind: 'if', test: q.test, then: null, else: null }));
    if (node) this.push((node.else ??= [unknown()]));
  }

  w(q) {
    const node = this.place(q, () => ({ kind: 'while', test: q.test, body: null }));
    if (node) {
      this.push((node.body ??= [unknown()]));
      this.cur.top().loop = true;
    }
  }

  /** A loop iteration starts: the body's cursor goes back to its start. */
  i() {
    const z = this.cur;
    if (z.detached) return;
    const frame = z.top();
    if (!frame.loop) return this.conflict('a loop iteration outside its loop');
    if (frame.started && !frame.terminated) this.complete(frame);
    frame.started = true;
    frame.terminated = false;
    frame.index = 0;
  }

  lb(q) {
    const node = this.place(q, () => ({ kind: 'label', label: q.label, body: null }));
    if (node) this.push((node.body ??= [unknown()]));
  }

  bk(q) {
    const node = this.place(q, () => ({ kind: 'block', body: null }));
    if (node) this.push((node.body ??= [unknown()]));
  }

  ty(q) {
    const depth = this.cur.frames.length;
    const calls = this.cur.calls.length;
    const node = this.place(q, () => ({ kind: 'try', param: q.param, body: null, handler: null }));
    if (node) this.push((node.body ??= [unknown()]));
    return { z: this.cur, depth, calls, node };
  }

  /** The catch clause runs: back to the `try` (resuming its handler if an await threw), into the handler. */
  ca(k) {
    if (this.cur !== k.z) this.resume(k.z);
    // Calls the throw left unfinished are over.
    k.z.calls.length = Math.min(k.z.calls.length, k.calls);
    if (this.cur.detached || !k.node) return;
    this.popTo(k.depth, false);
    this.push((k.node.handler ??= [unknown()]));
  }

  // ------------------------------------------------------------------------------------------ calls
  /**
   * A call is about to run (Fig. 5's pushArg…named): an instrumented callee will consume it. The callee is
   * given, or its object and key (it is then looked up without running a getter), or neither.
   */
  c(q, callee, object, key) {
    if (callee === undefined && arguments.length > 2) callee = lookup(object, key);
    const info = typeof callee === 'function' ? this.functions.get(callee) : undefined;
    const depth = this.cur.frames.length;
    const inline = Boolean(info && !info.async && !q.new);
    let node = inline
      ? this.place(q, () => ({ kind: 'named', bind: q.bind, callee: q.callee, args: q.args, fn: info.id, body: null }))
      : this.place(q, () => ({ kind: 'call', bind: q.bind, callee: q.callee, args: q.args, new: q.new, handlers: [] }));
    if (node && node.kind === 'call' && !inline) {
      // A call site that called an intrinsic and then something else is an ordinary call.
      const intrinsic = intrinsicName(callee, q.new, object, key);
      if (!this.called.has(node)) {
        if (intrinsic) node.intrinsic = intrinsic;
        this.called.add(node);
      } else if (node.intrinsic !== undefined && node.intrinsic !== intrinsic) {
        delete node.intrinsic;
      }
    }
    if (node && (node.kind === 'named') !== inline) {
      this.conflict('a call site that called a traced function calls a built-in, or the other way');
      node = null;
    } else if (node && inline && node.fn !== info.id) {
      this.conflict(`a call site that called ${node.fn} calls ${info.id}`);
      node = null;
    }
    // Pushed even without a node, so the `d` after the call pops it.
    this.cur.calls.push({ node, fn: node && inline ? node.fn : null, depth, consumed: false });
  }

  /** The call returned `value`. */
  d(value) {
    const call = this.cur.calls.pop();
    if (!call || !call.node || this.cur.detached) return;
    this.popTo(call.depth, true);
    addType(call.node, value);
  }

  /** A function starts (Figs. 5 and 8): inlined into a pending call to it, or a handler. */
  en(q, args) {
    const z = this.cur;
    const top = z.calls[z.calls.length - 1];
    const pending = top && !top.consumed ? top : null;
    if (pending && pending.node && !z.detached && pending.fn === q.fn && !q.async) {
      pending.consumed = true;
      const node = pending.node;
      node.params = q.params;
      if (q.rest) node.rest = q.rest;
      const depth = z.frames.length;
      this.push((node.body ??= [unknown()]));
      return { kind: 'inline', z, depth, calls: z.calls.length };
    }
    const handler = this.handler(q);
    const detached = this.outer.length > 0 && z.detached;
    if (args && !detached) {
      // The types each parameter was given, per handler (what the compiled code guards on).
      handler.paramTypes ??= q.params.map(() => []);
      for (let i = 0; i < q.params.length; i += 1) {
        const holder = { types: handler.paramTypes[i] };
        addType(holder, args[i]);
        handler.paramTypes[i] = holder.types;
      }
    }
    if (pending && pending.node && pending.node.handlers && !pending.node.handlers.includes(handler.id)) {
      pending.node.handlers.push(handler.id);
    }
    this.outer.push(z);
    this.cur = new Zipper(handler, detached);
    return { kind: 'handler', z: this.cur };
  }

  handler(q) {
    let handler = this.byFunction.get(q.fn);
    if (!handler) {
      handler = { id: this.handlers.length, fn: q.fn, kind: q.kind, params: q.params, async: q.async, body: [unknown()] };
      if (q.rest) handler.rest = q.rest;
      this.handlers.push(handler);
      this.byFunction.set(q.fn, handler);
    }
    return handler;
  }

  /** A module's top level ran to its end: its body is complete. */
  end() {
    if (this.cur.detached) return;
    this.popTo(1, true);
    this.complete(this.cur.frames[0]);
  }

  /** A function ends, by a return, falling off its end or a throw. */
  lv(token) {
    if (!token) return;
    if (token.kind === 'inline') {
      if (this.cur === token.z) {
        this.popTo(token.depth, false);
        // Calls a throw left unfinished inside the function are over.
        token.z.calls.length = Math.min(token.z.calls.length, token.calls);
      }
      return;
    }
    const z = token.z;
    if (this.cur === z) {
      z.state = 'done';
      this.cur = this.outer.pop() ?? this.idle;
    } else {
      // An await that threw ended the function while it was suspended: nothing is current to restore.
      z.state = 'done';
    }
  }

  // ------------------------------------------------------------------------------------------ await
  /** Before `await`: the event (Fig. 8's newHandler: its handler is the rest of this function). */
  s(q) {
    const node = this.place(q, () => ({ kind: 'await', bind: q.bind, value: q.value }));
    const z = this.cur;
    z.state = 'suspended';
    this.cur = this.outer.pop() ?? this.idle;
    return { z, node };
  }

  /** After `await`: the function's zipper is current again (loadHandler). */
  r(token, value) {
    this.resume(token.z);
    if (token.node && !token.z.detached) addType(token.node, value);
  }

  resume(z) {
    if (this.cur === z) return;
    this.outer.push(this.cur);
    this.cur = z;
    z.state = 'active';
  }

  // ------------------------------------------------------------------------------------------ the tree
  /** The trace tree with its handlers: code, positions and types only. */
  dump() {
    return {
      version: TRACE_VERSION,
      handlers: this.handlers.map((h) => {
        const out = { id: h.id, fn: h.fn, kind: h.kind, params: h.params, async: h.async, body: h.body };
        if (h.rest) out.rest = h.rest;
        if (h.paramTypes) out.param_types = h.paramTypes;
        return out;
      }),
      conflicts: this.conflicts,
    };
  }
}

const tracer = new Tracer();
globalThis.__kilnBreakout = tracer;
module.exports = tracer;

if (process.env.KILN_BREAKOUT_DUMP) {
  const file = process.env.KILN_BREAKOUT_DUMP;
  process.on('exit', () => {
    require('fs').writeFileSync(file, JSON.stringify(tracer.dump()));
  });
}
