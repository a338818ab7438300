"""`kiln breakout instrument DIR --out OUT`: the real binary rewrites a package, and the copy runs
under the tracing runtime exactly as the package does, dumping a trace tree."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kiln_harness import KILN_BIN, ROOT

FIXTURES = ROOT / "crates" / "kiln-breakout" / "tests" / "fixtures"
RUNTIME = ROOT / "runtimes" / "nodejs" / "breakout.js"

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

DRIVE = """
const { handler } = require(process.argv[1]);
(async () => {
  for (const event of JSON.parse(process.argv[2])) console.log(JSON.stringify(await handler(event)));
})();
"""


def instrument(*args):
    return subprocess.run(
        [str(KILN_BIN), "breakout", "instrument", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def drive(handler: Path, events, *, traced_dump: Path | None = None) -> str:
    command = ["node"]
    env = dict(os.environ)
    if traced_dump is not None:
        command += ["--require", str(RUNTIME)]
        env["KILN_BREAKOUT_DUMP"] = str(traced_dump)
    command += ["-e", DRIVE, str(handler), json.dumps(events)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_node
def test_the_instrumented_maze_answers_as_written_and_dumps_a_tree(tmp_path):
    out = tmp_path / "maze"
    result = instrument(FIXTURES / "maze", "--out", out)
    assert result.returncode == 0, result.stderr
    assert "1 file instrumented, 0 copied as they are, 0 unsupported constructs marked" in result.stderr
    events = [{"x1": 0, "y1": 0, "x2": 29, "y2": 29}, {"x1": 3, "y1": 0, "x2": 5, "y2": 5}]
    dump = tmp_path / "trace.json"
    expected = drive(FIXTURES / "maze" / "index.js", events)
    assert drive(out / "index.js", events, traced_dump=dump) == expected
    tree = json.loads(dump.read_text())
    assert tree["version"] == 1
    assert [h["fn"] for h in tree["handlers"]][0] == "init:index.js"
    assert tree["conflicts"] == []


@needs_node
def test_a_site_is_marked_and_costs_only_its_path(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    (package / "index.js").write_text(
        "exports.handler = async (event) => {\n"
        "  if (event.debug) { return eval(event.debug); }\n"
        "  return event.n * 2;\n"
        "};\n"
    )
    out = tmp_path / "out"
    result = instrument(package, "--out", out, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["instrumented"] == ["index.js"]
    assert [s["construct"] for s in report["sites"]] == ["eval"]
    dump = tmp_path / "trace.json"
    assert drive(out / "index.js", [{"n": 4}], traced_dump=dump) == "8\n"
    assert "unsupported" not in dump.read_text()
    assert drive(out / "index.js", [{"debug": "6 * 7"}], traced_dump=dump) == "42\n"
    assert '"at":"index.js:2:29"' in dump.read_text()


def test_an_output_inside_the_package_or_a_missing_package_is_refused(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    (package / "index.js").write_text("exports.handler = async () => 1;\n")
    result = instrument(package, "--out", package / "out")
    assert result.returncode == 2
    assert "inside the package" in result.stderr
    result = instrument(tmp_path / "missing", "--out", tmp_path / "out")
    assert result.returncode == 2
