// ?:, &&, ||, ??, ?. with effects: evaluation order and short-circuiting.
const log = [];
function f(tag, value) { log.push(tag); return value; }
const a = f("a", 0) || f("b", 2) && f("c", 3);
const b = f("d", null) ?? f("e", false) ?? f("f", 1);
const c = f("g", 1) ? f("h", "yes") : f("i", "no");
const o = { p: { q: [1, { r: () => 7 }] }, m() { return this.k; }, k: 5 };
const d = o?.p?.q[1].r?.();
const e = o.x?.y.z();
const g = o.m?.();
const h = f("j", undefined)?.[f("k", 1)];
let i = 0;
const j = [i++, i++, ++i, i += 2, (i = 10, i * 2)];
let k = null;
k ??= f("l", 4);
k ||= f("m", 5);
k &&= f("n", 6);
const z = f("o", 1) + (f("p", 0) ? f("q", 1) : f("r", 2)) * f("s", 3);
const s = `sum ${a} and ${b ?? "none"}: ${[c, d, e, g, h].join("/")}`;
const t = `${{ toString() { return "T"; }, valueOf() { return "V"; } }}`;
console.log(JSON.stringify([a, b, c, d, e, g, h, j, k, z, s, t, log]));
