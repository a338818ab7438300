// A switch's cases share one scope: a `let` or `const` of one case is seen by the next one it
// falls into, and by a closure made there.
function describe(kind) {
  const out = [];
  switch (kind) {
    case "a":
      let label = "alpha";
      const { n = 1, ...rest } = { m: 2 };
      out.push(label, n, JSON.stringify(rest));
    case "b":
      label = (typeof label === "undefined" ? "none" : label) + "!";
      out.push(label);
      break;
    default: {
      let inner = kind;
      out.push(() => inner);
    }
  }
  return out.map((x) => (typeof x === "function" ? x() : x)).join(" ");
}
console.log(describe("a"), "|", describe("c"));
