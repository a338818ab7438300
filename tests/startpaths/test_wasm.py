"""The `wasm` runtime: WASI preview 1 modules run by wasmtime in the node agent, one fresh instance per request.

The main fixture is a Go function (tests/functions/wasm_go, built here with GOOS=wasip1) whose event picks an action,
so that one module exercises the ABI, the sandbox and every way a function can fail. The hot path (a pre-initialised
snapshot) is exercised with WAT modules that export `wizer.initialize`.
"""

import json
import os
import re
import shutil
import subprocess
import threading
import time

import pytest
import requests

from kiln_harness import FUNCTIONS, node_status, snapshot_of, start_path, wait_for, wait_ready, zip_files

GO_FIXTURE = FUNCTIONS / "wasm_go"


@pytest.fixture(scope="session")
def go_wasm(tmp_path_factory):
    """The Go fixture compiled to a WASI module."""
    if shutil.which("go") is None:
        pytest.fail("Go is needed to build the wasm test function (GOOS=wasip1)")
    out = tmp_path_factory.mktemp("wasm") / "function.wasm"
    subprocess.run(["go", "build", "-trimpath", "-o", str(out), "."], cwd=GO_FIXTURE, check=True,
                   env={**os.environ, "GOOS": "wasip1", "GOARCH": "wasm", "CGO_ENABLED": "0",
                        "GOFLAGS": "-mod=mod"})
    return out.read_bytes()


def init_module(version):
    """A WAT module whose `wizer.initialize` sets a flag: `_start` answers the JSON string
    "<version> ran_init=0" when it starts from the pre-initialised snapshot, and "… ran_init=1" when it had to run
    the init itself (the plain module)."""
    text = f'"{version} ran_init=0"'
    length = len(text)
    escaped = text.replace('"', '\\"')
    return f"""(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $ready (mut i32) (i32.const 0))
  (data (i32.const 64) "{escaped}")
  (func $init (export "wizer.initialize") (global.set $ready (i32.const 1)))
  (func (export "_start")
    (if (i32.eqz (global.get $ready))
      (then (call $init) (i32.store8 (i32.const {64 + length - 2}) (i32.const 49))))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const {length}))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))))
"""


def deploy_go(server, name, go_wasm, files=None, **config):
    package = {"function.wasm": go_wasm, "data.txt": "package data\n"}
    package.update(files or {})
    config.setdefault("Timeout", 5)
    return server.deploy(name, "wasm", "function.wasm", files=package, **config)


def invoke(server, name, event):
    result, response = server.invoke(name, event, LogType="Tail")
    log = server.log_tail(response)
    report = [line for line in log.splitlines() if line.startswith("REPORT")][-1]
    return result, response, log, report


def set_prebake(server, name, mode):
    response = server.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration",
                                     json.dumps({"KilnPrebake": {"Mode": mode}}), {"Content-Type": "application/json"})
    assert response.status_code == 200, response.text


def test_go_function_echoes_the_event_with_lambda_logs(kiln, go_wasm):
    deploy_go(kiln, "wasm-echo", go_wasm)
    result, response, log, report = invoke(kiln, "wasm-echo", {"action": "echo", "value": {"a": [1, 2]}})
    assert response["StatusCode"] == 200
    assert "FunctionError" not in response
    assert result["echo"] == {"a": [1, 2]}
    assert 'wasm-go action="echo"' in log
    assert "Init Duration:" in report
    assert start_path(report) == "coldest"  # a Go module exports no init function
    assert re.search(r"Max Memory Used: [1-9]\d* MB", report), report


def test_environment_package_files_and_no_escape(kiln, go_wasm):
    deploy_go(kiln, "wasm-env", go_wasm, Environment={"Variables": {"GREETING": "hi"}})
    env, _ = kiln.invoke("wasm-env", {"action": "env"})
    assert env["GREETING"] == "hi"
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "wasm-env"
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "128"
    assert env["KILN_REQUEST_ID"]
    assert int(env["KILN_DEADLINE_MS"]) > time.time() * 1000
    # kiln's own credentials are never in a function's environment
    assert "AWS_SECRET_ACCESS_KEY" not in env

    read, _ = kiln.invoke("wasm-env", {"action": "read", "path": "/var/task/data.txt"})
    assert read == {"data": "package data\n"}
    # The package is read-only, and nothing outside it is visible: not the host, not other functions' code.
    wrote, _ = kiln.invoke("wasm-env", {"action": "write", "path": "/var/task/data.txt"})
    assert wrote["error"] != "<nil>"
    for path in ["/etc/passwd", "/var/task/../../etc/passwd", str(kiln.data_dir / "credentials.json")]:
        read, _ = kiln.invoke("wasm-env", {"action": "read", "path": path})
        assert "error" in read, (path, read)
    listed, _ = kiln.invoke("wasm-env", {"action": "list", "path": "/"})
    assert listed["names"] in ([], ["var"]), listed


@pytest.mark.parametrize("event, error_type, message", [
    ({"action": "error"}, "OrderError", "order 7 has no items"),
    ({"action": "panic"}, "Runtime.ExitError", "exit status 2"),
    ({"action": "exit"}, "Runtime.ExitError", "exit status 3"),
    ({"action": "loop"}, "Sandbox.Timedout", "Task timed out after 1.00 seconds"),
    ({"action": "sleep", "mb": 5000}, "Sandbox.Timedout", "Task timed out after 1.00 seconds"),
    ({"action": "alloc", "mb": 400}, "Runtime.OutOfMemory", "memory limit of 128 MB"),
    ({"action": "big", "mb": 7}, "Function.ResponseSizeTooLarge", "6291456"),
])
def test_function_failures_are_lambda_errors_and_the_function_lives_on(kiln, go_wasm, event, error_type, message):
    deploy_go(kiln, "wasm-fail", go_wasm, Timeout=1, MemorySize=128)
    begin = time.time()
    result, response, log, report = invoke(kiln, "wasm-fail", event)
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert result["errorType"] == error_type, result
    assert message in result["errorMessage"], result
    assert time.time() - begin < 20
    assert report.startswith("REPORT")
    ok, response = kiln.invoke("wasm-fail", {"action": "echo", "value": 1})
    assert ok["echo"] == 1 and "FunctionError" not in response


def test_memory_within_the_limit_is_usable(kiln, go_wasm):
    deploy_go(kiln, "wasm-mem", go_wasm, MemorySize=512)
    result, response, _, report = invoke(kiln, "wasm-mem", {"action": "alloc", "mb": 200})
    assert result == {"allocated_mb": 200}, result
    used = int(re.search(r"Max Memory Used: (\d+) MB", report).group(1))
    assert 200 <= used <= 512, report


def test_hot_path_is_the_pre_initialised_snapshot(kiln):
    kiln.deploy("wasm-hot", "wasm", "function.wat", files={"function.wat": init_module("v1")})
    snapshot = wait_ready(kiln, "wasm-hot")
    assert snapshot["kind"] == "wasm-snapshot", snapshot
    result, _, _, report = invoke(kiln, "wasm-hot", {})
    assert result == "v1 ran_init=0"
    assert start_path(report) == "hot", report
    init_ms = float(re.search(r"Init Duration: ([\d.]+) ms", report).group(1))
    assert init_ms < 1000, report

    # Prebaking off: the plain module runs its init in every request: the coldest path.
    set_prebake(kiln, "wasm-hot", "off")
    result, _, _, report = invoke(kiln, "wasm-hot", {})
    assert result == "v1 ran_init=1"
    assert start_path(report) == "coldest", report
    assert wait_ready(kiln, "wasm-hot")["kind"] == "wasm-module"


def test_code_update_invalidates_the_snapshot(kiln):
    kiln.deploy("wasm-update", "wasm", "function.wat", files={"function.wat": init_module("v1")})
    wait_ready(kiln, "wasm-update")
    assert kiln.invoke("wasm-update", {})[0] == "v1 ran_init=0"
    revision = snapshot_of(kiln, "wasm-update")["revision"]
    lam = kiln.client()
    lam.update_function_code(FunctionName="wasm-update", ZipFile=zip_files({"function.wat": init_module("v2")}))
    # The very next invocation runs the new code, whether or not its snapshot is ready yet.
    assert kiln.invoke("wasm-update", {})[0] == "v2 ran_init=0"
    assert snapshot_of(kiln, "wasm-update")["revision"] > revision


def test_lazy_prebake_builds_the_snapshot_on_the_first_request(kiln):
    kiln.deploy("wasm-lazy", "wasm", "function.wat", files={"function.wat": init_module("lazy")})
    kiln.settled("wasm-lazy")
    set_prebake(kiln, "wasm-lazy", "lazy")
    # The configuration update retired the module the deployment had prepared, and lazy builds none.
    assert snapshot_of(kiln, "wasm-lazy") is None
    first, _, _, report = invoke(kiln, "wasm-lazy", {})
    assert first == "lazy ran_init=0"
    assert start_path(report) == "coldest", report  # it waited for the build
    _, _, _, report = invoke(kiln, "wasm-lazy", {})
    assert start_path(report) == "hot", report


@pytest.mark.parametrize("files, handler, error_type", [
    ({"other.wasm": b"\0asm\1\0\0\0"}, "function.wasm", "Runtime.HandlerNotFound"),
    ({"function.wasm": b"not wasm at all"}, "function.wasm", "Runtime.InvalidEntrypoint"),
    ({"function.wat": '(module (import "env" "secret" (func)) (func (export "_start")))'}, "function.wat",
     "Runtime.InvalidEntrypoint"),
    ({"function.wat": "(module (memory 1))"}, "function.wat", "Runtime.InvalidEntrypoint"),
    ({"function.wasm": b"\0asm\1\0\0\0"}, "../function.wasm", "Runtime.HandlerNotFound"),
])
def test_a_bad_module_gets_a_clear_error(kiln, files, handler, error_type):
    kiln.deploy("wasm-bad", "wasm", handler, files=files)
    result, response = kiln.invoke("wasm-bad", {})
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert result["errorType"] == error_type, result
    assert result["errorMessage"], result


def test_concurrent_requests_get_their_own_instances(kiln, go_wasm):
    deploy_go(kiln, "wasm-many", go_wasm)
    results = [None] * 16

    def call(i):
        results[i] = kiln.invoke("wasm-many", {"action": "echo", "value": i})[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["echo"] for r in results] == list(range(len(results)))
    # Nothing stays resident between requests: no instance is left once they are done.
    assert not [i for i in node_status(kiln)["instances"] if i["function"] == "wasm-many"]


def test_reserved_concurrency_holds_for_wasm(kiln, go_wasm):
    deploy_go(kiln, "wasm-one", go_wasm)
    kiln.client().put_function_concurrency(FunctionName="wasm-one", ReservedConcurrentExecutions=1)
    seen = []

    def call():
        seen.append(kiln.invoke("wasm-one", {"action": "sleep", "mb": 500})[0])

    threads = [threading.Thread(target=call) for _ in range(3)]
    begin = time.time()
    for t in threads:
        t.start()
    running = wait_for(lambda: [i for i in node_status(kiln)["instances"] if i["function"] == "wasm-one"],
                       what="a running wasm request")
    assert len(running) == 1 and running[0]["state"] in ("starting", "busy")
    for t in threads:
        t.join()
    assert seen == [{"slept_ms": 500}] * 3
    assert time.time() - begin >= 1.5  # one at a time


def test_visible_in_metrics_and_status(kiln):
    kiln.deploy("wasm-metrics", "wasm", "function.wat", files={"function.wat": init_module("m")})
    wait_ready(kiln, "wasm-metrics")
    kiln.invoke("wasm-metrics", {})
    metrics = requests.get(f"{kiln.endpoint}/metrics", timeout=5).text
    assert re.search(r'kiln_cold_starts_total\{[^}]*function="wasm-metrics"[^}]*path="hot"[^}]*\} [1-9]', metrics) \
        or re.search(r'kiln_cold_starts_total\{[^}]*path="hot"[^}]*\} [1-9]', metrics), metrics
    disk = re.search(r'kiln_disk_bytes\{kind="snapshots"\} (\d+)', metrics)
    assert disk and int(disk.group(1)) > 0, metrics
    text = kiln.cli("status").stdout
    assert "wasm-snapshot" in text and "snapshots on disk" in text, text
    assert "wasm" in node_status(kiln)["runtimes"]


def test_restart_reuses_compiled_modules_and_survives_a_corrupt_cache(fresh_kiln, go_wasm):
    server = fresh_kiln()
    deploy_go(server, "wasm-restart", go_wasm)
    server.deploy("wasm-restart-hot", "wasm", "function.wat", files={"function.wat": init_module("r")})
    wait_ready(server, "wasm-restart")
    wait_ready(server, "wasm-restart-hot")
    cache = server.data_dir / "wasm-cache"
    compiled = sorted((cache / "compiled").glob("*.cwasm"))
    preinit = sorted((cache / "preinit").glob("*.wasm"))
    assert len(compiled) >= 2 and len(preinit) == 1, (compiled, preinit)
    # A rebuilt file is a new inode (written aside, then renamed); a reused one is only touched.
    stamps = {p: p.stat().st_ino for p in compiled + preinit}

    server.restart()
    assert server.invoke("wasm-restart", {"action": "echo", "value": "again"})[0]["echo"] == "again"
    _, _, _, report = invoke(server, "wasm-restart-hot", {})
    assert start_path(report) == "hot", report
    # Nothing was compiled or pre-initialised again: the artifacts on disk were mapped.
    assert {p: p.stat().st_ino for p in stamps} == stamps

    # A corrupt artifact is detected (its digest), logged, rebuilt, and the function still answers.
    for path in compiled:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    server.restart()
    assert server.invoke("wasm-restart", {"action": "echo", "value": "fixed"})[0]["echo"] == "fixed"
    _, _, _, report = invoke(server, "wasm-restart-hot", {})
    assert start_path(report) in ("hot", "coldest")
    assert server.invoke("wasm-restart-hot", {})[0] == "r ran_init=0"


def test_the_disk_cache_evicts_what_no_loaded_module_uses(fresh_kiln):
    # A limit of 0 MB: every file that no loaded module needs goes as soon as the cache is checked.
    server = fresh_kiln(extra_args=["--snapshot-disk-mb", "0"])
    for name in ("wasm-evict-a", "wasm-evict-b"):
        server.deploy(name, "wasm", "function.wat", files={"function.wat": init_module(name)})
        wait_ready(server, name)
    preinit = server.data_dir / "wasm-cache" / "preinit"
    compiled = server.data_dir / "wasm-cache" / "compiled"
    assert len(list(preinit.glob("*.wasm"))) == 2, "loaded modules keep their files"
    before = len(list(compiled.glob("*.cwasm")))
    assert before == 4  # each: the plain module and its snapshot, compiled

    server.client().delete_function(FunctionName="wasm-evict-a")
    wait_for(lambda: len(list(preinit.glob("*.wasm"))) == 1, what="the deleted function's snapshot to be evicted")
    wait_for(lambda: len(list(compiled.glob("*.cwasm"))) == 2, what="its compiled modules to be evicted")
    assert not list(preinit.glob("*.sha256.sha256"))
    assert len(list(preinit.glob("*.sha256"))) == 1, "digests go with their files"
    result, _, _, report = invoke(server, "wasm-evict-b", {})
    assert result == "wasm-evict-b ran_init=0" and start_path(report) == "hot"
    assert node_status(server)["snapshot_disk_bytes"] > 0
