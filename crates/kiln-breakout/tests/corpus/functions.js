// Arrows, function expressions, methods, `this`, hoisting of var and function declarations.
console.log(typeof later, hoisted(2), typeof v);
var v = 1;
function hoisted(x) { return x * v2 + 1; }
var v2 = 3;
const counter = {
  n: 0,
  inc() { this.n += 1; return this; },
  arrows() { return [1, 2].map((x) => this.n + x); },
};
counter.inc().inc();
const fact = function f(n) { return n <= 1 ? 1 : n * f(n - 1); };
const adders = [1, 2, 3].map((k) => (x) => x + k);
function later() {}
function outer() {
  var a = 1;
  if (a) { var b = 2; }
  function inner() { return a + b; }
  return inner();
}
const { x: [p, q] = [5, 6], ...rest } = { y: 1, z: 2 };
let m, n2, r;
[m, n2 = 9, ...r] = [1, undefined, 3, 4];
({ a: m, b: { c: n2 } = { c: 8 } } = { a: 7 });
console.log(counter.n, counter.arrows().join(), fact(5), adders.map((f) => f(10)).join(), outer(), p, q, JSON.stringify(rest), m, n2, r.join());
async function main() {
  const wait = async (x) => { await null; return x * 2; };
  const got = await wait(await wait(1));
  const both = (await wait(2)) + (await wait(3));
  console.log(got, both);
}
main();
