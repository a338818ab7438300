// Classes: constructors, methods, statics, fields, extends, super, and Error subclasses.
class Shape {
  kind = "shape";
  static count = 0;
  constructor(name) { this.name = name; Shape.count += 1; }
  describe() { return `${this.kind} ${this.name} with area ${this.area()}`; }
  area() { return 0; }
  static make(name) { return new Shape(name); }
}
class Rect extends Shape {
  kind = "rect";
  constructor(name, w, h) {
    super(name);
    this.w = w;
    this.h = h;
  }
  area() { return this.w * this.h; }
  describe() { return "[" + super.describe() + "]"; }
  static make(name) { return new Rect(name, 1, 1); }
}
class Square extends Rect {
  constructor(side) { super("square", side, side); }
}
class NotFound extends Error {
  constructor(what) {
    super(`no ${what}`);
    this.name = "NotFound";
    this.what = what;
  }
}
const shapes = [new Shape("blob"), new Rect("r", 2, 3), new Square(4), Rect.make("m"), Shape.make("s")];
const out = shapes.map((s) => s.describe());
out.push(String(shapes[2] instanceof Rect), String(shapes[2] instanceof Shape), String(Shape.count));
try {
  throw new NotFound("user");
} catch (err) {
  out.push(err.message, err.name, err.what, String(err instanceof NotFound), String(err instanceof Error));
}
const Anon = class { constructor() { this.v = 1; } get2() { return this.v * 2; } };
out.push(String(new Anon().get2()));
console.log(out.join("\n"));
