// try/catch/throw, labelled breaks, loops and switches after normalisation, updates.
function parse(text) {
  try {
    return JSON.parse(text);
  } catch ({ message }) {
    return "bad: " + message.length;
  }
}
function find(rows, target) {
  let found = null;
  search: for (let i = 0; i < rows.length; i++) {
    for (let j = 0; j < rows[i].length; j++) {
      if (rows[i][j] === target) { found = [i, j]; break search; }
    }
  }
  return found;
}
const out = [parse("[1,2]"), parse("{"), find([[1, 2], [3, 4]], 4), find([[1]], 9)];
let i = 0, total = 0;
while (i++ < 5 && total < 100) total += i;
out.push(i, total);
const grid = [[0, 1], [1, 0]];
const counts = { zero: 0, one: 0 };
for (const row of grid) for (const cell of row) switch (cell) { case 0: counts.zero++; break; default: counts.one++; }
out.push(counts);
function thrower(x) { if (x > 1) throw new TypeError("too big: " + x); return x; }
for (const x of [1, 2]) { try { out.push(thrower(x)); } catch (e) { out.push(e.constructor.name + " " + e.message); } }
console.log(JSON.stringify(out));
