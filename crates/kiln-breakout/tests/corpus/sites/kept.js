// Constructs outside the subset are kept as written by normalisation, so the program (which
// the tracing instance runs) behaves as before: accessors, static blocks, private members,
// generators, for…in, with-free sloppy code.
class Temperature {
  #celsius = 0;
  static units = [];
  static { Temperature.units.push("C"); }
  get fahrenheit() { return this.#celsius * 9 / 5 + 32; }
  set fahrenheit(f) { this.#celsius = (f - 32) * 5 / 9; }
}
const t = new Temperature();
t.fahrenheit = 212;
const o = { get twice() { return this.n * 2; }, n: 4 };
function* count(n) { for (let i = 0; i < n; i++) yield i; }
const keys = [];
for (const k in { a: 1, b: 2 }) keys.push(k);
console.log(t.fahrenheit, Temperature.units.join(), o.twice, [...count(3)].join(), keys.join());
