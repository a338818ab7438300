"""`kiln breakout check DIR`: the real binary on fixture packages, its output and exit codes."""

import json
import subprocess
from pathlib import Path

from kiln_harness import KILN_BIN, ROOT

FIXTURES = ROOT / "crates" / "kiln-breakout" / "tests" / "fixtures"


def check(*args):
    return subprocess.run(
        [str(KILN_BIN), "breakout", "check", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_benchmark_handlers_pass():
    for name in ["authorize", "upload", "status", "banking", "autocomplete", "maze", "shift"]:
        result = check(FIXTURES / name)
        assert result.returncode == 0, (name, result.stdout, result.stderr)
        assert result.stdout == ""
        assert "0 unsupported constructs" in result.stderr


def write_unsupported(root: Path):
    (root / "lib").mkdir()
    (root / "index.js").write_text(
        "const { execSync } = require('child_process');\n"
        "exports.handler = async (event) => eval(event.code);\n"
    )
    (root / "lib" / "meta.js").write_text(
        "module.exports = new Proxy({}, { get: () => 1 });\n"
        "const o = { get x() { return 1; } };\n"
    )


def test_unsupported_constructs_are_listed_with_their_positions(tmp_path):
    write_unsupported(tmp_path)
    result = check(tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        "index.js:1:22",
        "index.js:2:36",
        "lib/meta.js:1:22",
        "lib/meta.js:2:13",
    ]
    assert lines[0].startswith("index.js:1:22: require('child_process'): ")
    assert lines[1].startswith("index.js:2:36: eval: ")
    assert lines[2].startswith("lib/meta.js:1:22: Proxy: ")
    assert lines[3].startswith("lib/meta.js:2:13: getter: ")
    assert "4 unsupported constructs in 2 files checked" in result.stderr


def test_json_output(tmp_path):
    write_unsupported(tmp_path)
    result = check(tmp_path, "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["files_checked"] == 2
    assert report["sites"][0] == {
        "file": "index.js",
        "line": 1,
        "col": 22,
        "construct": "require('child_process')",
        "reason": "`child_process` starts processes",
    }
    assert [s["construct"] for s in report["sites"]] == [
        "require('child_process')",
        "eval",
        "Proxy",
        "getter",
    ]
    clean = check(FIXTURES / "maze", "--json")
    assert clean.returncode == 0
    assert json.loads(clean.stdout) == {"files_checked": 1, "sites": []}


def test_a_file_that_does_not_parse_is_reported(tmp_path):
    (tmp_path / "broken.js").write_text("exports.handler = async (event => {\n")
    result = check(tmp_path)
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith("broken.js:") and ": syntax error: the file does not parse: " in line


def test_a_bad_directory_is_exit_status_2(tmp_path):
    missing = check(tmp_path / "missing")
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert "cannot read" in missing.stderr and "missing" in missing.stderr
    assert "panicked" not in missing.stderr
    file = tmp_path / "a.js"
    file.write_text("1;\n")
    not_dir = check(file)
    assert not_dir.returncode == 2
    assert "is not a directory" in not_dir.stderr
