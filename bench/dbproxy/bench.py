"""pgbench -S with 64 clients: straight to PostgreSQL, through kiln's proxy, and through
PgBouncer (transaction mode, when installed), side by side in interleaved rounds on one private
cluster. Writes bench/results/dbproxy.md.

    bench/dbproxy/run.sh [--seconds 5] [--rounds 3] [--clients 64] [--pool 16]
"""

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from pg_harness import Postgres, free_port  # noqa: E402

PROXY_BIN = Path(os.environ.get("KILN_DBPROXY_BIN", ROOT / "target" / "release" / "kiln-dbproxy"))


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def start_proxy(pg, pool):
    port = free_port()
    env = dict(os.environ, KILN_DBPROXY_UPSTREAM_PASSWORD=pg.password)
    proc = subprocess.Popen([str(PROXY_BIN), "--listen", f"127.0.0.1:{port}", "--upstream", pg.addr,
                             "--database", pg.database, "--user", pg.user, "--pool-size", str(pool)],
                            env=env, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def start_pgbouncer(pg, pool):
    exe = shutil.which("pgbouncer")
    if not exe:
        return None, None, None
    port = free_port()
    d = Path(tempfile.mkdtemp(prefix="kiln-pgbouncer-"))
    (d / "userlist.txt").write_text(f'"{pg.user}" "{pg.password}"\n')
    (d / "pgbouncer.ini").write_text(f"""[databases]
{pg.database} = host=127.0.0.1 port={pg.port} dbname={pg.database}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {d}/userlist.txt
pool_mode = transaction
default_pool_size = {pool}
max_client_conn = 500
logfile = {d}/pgbouncer.log
pidfile = {d}/pgbouncer.pid
""")
    subprocess.run(["chown", "-R", "postgres:postgres", str(d)], check=True)
    proc = subprocess.Popen(["runuser", "-u", "postgres", "--", exe, str(d / "pgbouncer.ini")],
                            stderr=subprocess.DEVNULL)
    proc.workdir = d
    wait_port(port)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return proc, port, version


def pgbench(pg, port, seconds, clients, logdir, label):
    prefix = logdir / label
    env = dict(os.environ, PGPASSWORD=pg.password)
    out = subprocess.run(
        ["pgbench", "-n", "-S", "-c", str(clients), "-j", "2", "-T", str(seconds), "-h", "127.0.0.1",
         "-p", str(port), "-U", pg.user, "-l", "--log-prefix", str(prefix), pg.database],
        env=env, capture_output=True, text=True, check=True).stdout
    tps_lines = [line for line in out.splitlines() if line.startswith("tps")]
    if not tps_lines:
        raise RuntimeError(f"pgbench against {label} (port {port}) reported no throughput:\n{out}")
    tps = float(tps_lines[0].split("=")[1].split()[0])
    lat = []
    for f in logdir.glob(f"{label}.*"):
        for line in f.read_text().splitlines():
            lat.append(int(line.split()[2]))
        f.unlink()
    lat.sort()
    return tps, lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--pool", type=int, default=16)
    args = ap.parse_args()

    # Direct clients, plus the backends the proxy and PgBouncer keep open between rounds.
    pg = Postgres(max_connections=args.clients + 2 * args.pool + 10).start()
    proxy = bouncer = logdir = None
    try:
        subprocess.run(["pgbench", "-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user,
                        pg.database], env=dict(os.environ, PGPASSWORD=pg.password), check=True,
                       capture_output=True)
        proxy, proxy_port = start_proxy(pg, args.pool)
        bouncer, bouncer_port, bouncer_version = start_pgbouncer(pg, args.pool)
        targets = [("direct", pg.port), ("kiln-dbproxy", proxy_port)]
        if bouncer:
            targets.append((bouncer_version, bouncer_port))
        logdir = Path(tempfile.mkdtemp(prefix="kiln-pgbench-"))
        results = {name: [] for name, _ in targets}
        for r in range(args.rounds):
            for name, port in targets:
                results[name].append(pgbench(pg, port, args.seconds, args.clients, logdir, f"r{r}"))
                print(name, results[name][-1], flush=True)
    finally:
        for p in (proxy, bouncer):
            if p:
                p.terminate()
                p.wait()
        if bouncer:
            shutil.rmtree(bouncer.workdir, ignore_errors=True)
        if logdir:
            shutil.rmtree(logdir, ignore_errors=True)
        pg.cleanup()

    direct_tps = statistics.median(t for t, _, _ in results["direct"])
    direct_p50 = round(statistics.median(p for _, p, _ in results["direct"]))
    rows = []
    for name, runs in results.items():
        tps = statistics.median(t for t, _, _ in runs)
        p50 = round(statistics.median(p for _, p, _ in runs))
        p99 = round(statistics.median(p for _, _, p in runs))
        rows.append(f"| {name} | {tps:,.0f} | {tps / direct_tps:.2f} | {p50} | {p50 - direct_p50:+} | {p99} |")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    md = f"""# kiln-dbproxy: `pgbench -S`, {args.clients} clients

Command: `bench/dbproxy/run.sh --seconds {args.seconds} --rounds {args.rounds} --clients {args.clients} --pool {args.pool}`
(`pgbench -n -S -c {args.clients} -j 2 -T {args.seconds}`, simple protocol, scale 1, the targets
interleaved round by round; medians of {args.rounds} rounds; latencies from pgbench's
per-transaction log, in µs). The proxy and PgBouncer pool {args.pool} backends in transaction
mode; direct is {args.clients} backends.

Machine: {os.cpu_count()} vCPUs ({cpu}), {platform.system()} {platform.release()}, shared with other
work while it ran; PostgreSQL 15 (fsync off), pgbench, the proxy and PgBouncer on the same cores.

| target | tps | × direct | p50 | p50 − direct | p99 |
|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"
    out = ROOT / "bench" / "results" / "dbproxy.md"
    out.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
