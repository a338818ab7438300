"""kiln's PostgreSQL connection proxy against a real PostgreSQL 15, with psycopg 3, asyncpg,
psql and raw sockets as clients. The proxy runs standalone (`kiln-dbproxy`) with a pool of
two backends, a main listener and a shadow one."""

import asyncio
import atexit
import io
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pg_harness import Postgres, free_port, unavailable_reason  # noqa: E402

psycopg = pytest.importorskip("psycopg")
asyncpg = pytest.importorskip("asyncpg")

ROOT = Path(__file__).resolve().parent.parent.parent
PROXY_BIN = Path(os.environ.get("KILN_DBPROXY_BIN", ROOT / "target" / "debug" / "kiln-dbproxy"))
POOL = 2

if unavailable_reason():
    pytest.skip(unavailable_reason(), allow_module_level=True)


class Proxy:
    def __init__(self, pg, pool=POOL, queue_timeout=1.0, extra=()):
        self.pg = pg
        self.port = free_port()
        self.shadow_port = free_port()
        env = dict(os.environ, KILN_DBPROXY_UPSTREAM_PASSWORD=pg.password)
        self.log = open(pg.dir / f"kiln-dbproxy-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [str(PROXY_BIN), "--listen", f"127.0.0.1:{self.port}", "--listen-shadow",
             f"127.0.0.1:{self.shadow_port}", "--upstream", pg.addr, "--database", pg.database,
             "--user", pg.user, "--pool-size", str(pool), "--queue-timeout", str(queue_timeout), *extra],
            env=env, stderr=self.log)
        # Not left behind by a test that times out.
        atexit.register(self.stop)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("kiln-dbproxy did not start")

    def url(self, shadow=False, password=None):
        port = self.shadow_port if shadow else self.port
        return self.pg.url(port=port, password=password)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if os.environ.get("KILN_DBPROXY_KEEP_LOG"):
            subprocess.run(["cp", self.log.name, "/tmp/"])


@pytest.fixture(scope="module")
def pg():
    if not PROXY_BIN.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "kiln-dbproxy", "--bin", "kiln-dbproxy"], cwd=ROOT,
                       check=True)
    server = Postgres().start()
    server.psql("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL, n int DEFAULT 0)",
                database=server.database, user=server.user)
    server.psql("INSERT INTO items (name) SELECT 'item' || g FROM generate_series(1, 20) g", user=server.user)
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def proxy(pg):
    p = Proxy(pg)
    yield p
    p.stop()


def connect(proxy, **kw):
    kw.setdefault("autocommit", True)
    kw.setdefault("prepare_threshold", 0)
    return psycopg.connect(proxy.url(shadow=kw.pop("shadow", False)), connect_timeout=10, **kw)


def test_psycopg_prepared_statements_across_many_clients(proxy, pg):
    errors, peak = [], [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], pg.backends())
            time.sleep(0.05)

    def work(k):
        try:
            with connect(proxy) as c:
                for i in range(15):
                    assert c.execute("SELECT %s::int + %s::int", (i, k)).fetchone() == (i + k,)
                    row = c.execute("SELECT name FROM items WHERE id = %s", (i % 20 + 1,)).fetchone()
                    assert row == (f"item{i % 20 + 1}",)
                with c.transaction():
                    c.execute("UPDATE items SET n = n + 1 WHERE id = %s", (k % 20 + 1,))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert not errors, errors
    assert 1 <= peak[0] <= POOL


def test_asyncpg_prepared_statements_and_transactions(proxy):
    async def main():
        conns = [await asyncpg.connect(proxy.url()) for _ in range(8)]

        async def work(c, k):
            stmt = await c.prepare("SELECT $1::text || '-' || $2::int")
            for i in range(10):
                assert await stmt.fetchval("a", i) == f"a-{i}"
                assert await c.fetchval("SELECT $1::int * 3", i) == 3 * i
            async with c.transaction():
                await c.execute("UPDATE items SET n = n + 1 WHERE id = $1", k + 1)
                assert await c.fetchval("SELECT n FROM items WHERE id = $1", k + 1) >= 1
            await stmt.fetchval("b", k)

        await asyncio.gather(*(work(c, k) for k, c in enumerate(conns)))
        for c in conns:
            await c.close()

    asyncio.run(main())


def test_transactions_commit_and_roll_back(proxy, pg):
    with connect(proxy, autocommit=False) as c:
        c.execute("INSERT INTO items (name) VALUES ('committed')")
        c.commit()
        c.execute("INSERT INTO items (name) VALUES ('rolled-back')")
        c.rollback()
    assert pg.psql("SELECT count(*) FROM items WHERE name = 'committed'") == "1"
    assert pg.psql("SELECT count(*) FROM items WHERE name = 'rolled-back'") == "0"


def test_copy_in_and_out(proxy, pg):
    with connect(proxy) as c:
        c.execute("CREATE TABLE IF NOT EXISTS copied (a int, b text)")
        with c.cursor() as cur:
            with cur.copy("COPY copied (a, b) FROM STDIN") as cp:
                for i in range(100):
                    cp.write_row((i, f"row{i}"))
            with cur.copy("COPY copied TO STDOUT") as cp:
                rows = list(cp.rows())
        assert len(rows) == 100
        assert c.execute("SELECT count(*) FROM copied").fetchone() == (100,)


def test_queue_timeout_is_53300(proxy):
    holders = [connect(proxy, autocommit=False) for _ in range(POOL)]
    try:
        for h in holders:
            h.execute("SELECT 1")  # each now holds a backend in its transaction
        with connect(proxy) as c:
            with pytest.raises(psycopg.Error) as err:
                c.execute("SELECT 1")
            assert err.value.sqlstate == "53300"
            assert "stayed busy" in str(err.value)
            holders[0].rollback()
            assert c.execute("SELECT 2").fetchone() == (2,)
    finally:
        for h in holders:
            h.close()


REFUSED = [
    "SET search_path = public",
    "RESET ALL",
    "SELECT set_config('work_mem', '8MB', false)",
    "SET ROLE kiln",
    "SET SESSION AUTHORIZATION kiln",
    "PREPARE q AS SELECT 1",
    "EXECUTE q",
    "DEALLOCATE ALL; SELECT 1",
    "LISTEN jobs",
    "SELECT pg_advisory_lock(42)",
    "CREATE TEMP TABLE tmp (a int)",
    "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    "LOAD 'auto_explain'",
    "DISCARD ALL",
]


@pytest.mark.parametrize("sql", REFUSED)
def test_session_state_is_refused_with_0A000(proxy, sql):
    with connect(proxy) as c:
        with pytest.raises(psycopg.Error) as err:
            c.execute(sql)
        assert err.value.sqlstate == "0A000"
        assert "kiln's database proxy" in str(err.value)
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_what_is_allowed(proxy):
    with connect(proxy, autocommit=False) as c:
        c.execute("SET LOCAL statement_timeout = '5s'")
        c.execute("SELECT pg_advisory_xact_lock(7)")
        c.execute("CREATE TEMP TABLE scratch (a int) ON COMMIT DROP")
        c.execute("SET TIME ZONE 'UTC'")
        c.commit()


def test_tracked_parameters_follow_their_client(proxy):
    with connect(proxy) as tokyo, connect(proxy) as lima:
        tokyo.execute("SET TimeZone = 'Asia/Tokyo'")
        lima.execute("SET TimeZone = 'America/Lima'")
        for _ in range(10):
            assert tokyo.execute("SELECT current_setting('TimeZone')").fetchone() == ("Asia/Tokyo",)
            assert lima.execute("SELECT current_setting('TimeZone')").fetchone() == ("America/Lima",)
        with connect(proxy) as other:
            assert other.execute("SELECT current_setting('TimeZone')").fetchone()[0] not in (
                "Asia/Tokyo", "America/Lima")


def test_wrong_password_is_28P01(proxy):
    with pytest.raises(psycopg.OperationalError) as err:
        psycopg.connect(proxy.url(password="wrong"), connect_timeout=5)
    assert "password authentication failed" in str(err.value)
    assert err.value.sqlstate in (None, "28P01")


def raw(proxy):
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def read_error(sock):
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    assert data[:1] == b"E", data
    fields = dict((f[:1], f[1:].decode()) for f in data[5:].split(b"\0") if f)
    return fields[b"C"], fields[b"M"]


def test_ssl_request_is_answered_N(proxy):
    with raw(proxy) as s:
        s.sendall(struct.pack("!II", 8, 80877103))
        assert s.recv(1) == b"N"
        s.sendall(struct.pack("!II", 8, 80877104))  # GSSENCRequest
        assert s.recv(1) == b"N"
    with psycopg.connect(proxy.url() + "?sslmode=prefer", connect_timeout=5) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_malformed_and_oversized_messages_are_08P01(proxy):
    with raw(proxy) as s:
        s.sendall(struct.pack("!II", 8, 1234))
        code, msg = read_error(s)
        assert code == "08P01" and "unsupported frontend protocol" in msg
    with raw(proxy) as s:
        startup = b"user\0kiln\0database\0kiln\0\0"
        s.sendall(struct.pack("!II", 8 + len(startup), 196608) + startup)
        assert s.recv(1) == b"R"
        s.recv(4096)
        s.sendall(b"p" + struct.pack("!I", 100_000_000))
        code, msg = read_error(s)
        assert code == "08P01" and "over the proxy's limit" in msg


def test_replication_connections_are_refused(proxy):
    with raw(proxy) as s:
        startup = b"user\0kiln\0database\0kiln\0replication\0database\0\0"
        s.sendall(struct.pack("!II", 8 + len(startup), 196608) + startup)
        code, msg = read_error(s)
        assert code == "0A000" and "replication" in msg


def test_cancel_reaches_the_backend(proxy):
    with connect(proxy) as c:
        threading.Timer(0.5, c.cancel).start()
        started = time.time()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("SELECT pg_sleep(20)")
        assert time.time() - started < 15
        assert c.execute("SELECT 1").fetchone() == (1,)


HOLDER = """
import sys, time, psycopg
c = psycopg.connect(sys.argv[1], autocommit=False)
c.execute("SELECT * FROM items WHERE id = 1 FOR UPDATE")
print("locked", flush=True)
time.sleep(60)
"""


def test_killed_client_leaves_no_transaction_or_lock(proxy, pg):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, proxy.url()], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        holder.kill()
        holder.wait()
        deadline = time.time() + 10
        while time.time() < deadline:
            open_txns = pg.psql("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'")
            if open_txns == "0":
                break
            time.sleep(0.1)
        assert open_txns == "0"
        with connect(proxy, autocommit=False) as c:
            c.execute("SET LOCAL lock_timeout = '2s'")
            c.execute("SELECT * FROM items WHERE id = 1 FOR UPDATE")
            c.rollback()
    finally:
        holder.kill()


def test_shadow_writes_leave_the_data_unchanged(proxy, pg):
    before = pg.dump_data()
    for i in range(30):
        with connect(proxy, shadow=True) as c:
            c.execute("INSERT INTO items (name) VALUES (%s)", (f"shadow{i}",))
            c.execute("UPDATE items SET n = n + 100 WHERE id = %s", (i % 20 + 1,))
        with connect(proxy, shadow=True, autocommit=False) as c:
            c.execute("INSERT INTO items (name) VALUES (%s)", (f"explicit{i}",))
            c.execute("DELETE FROM items WHERE id = %s", (i % 20 + 1,))
            c.commit()  # answered COMMIT, executed as ROLLBACK
        with connect(proxy, shadow=True) as c:
            c.execute("BEGIN")
            c.execute("INSERT INTO items (name) VALUES ('q')")
            assert c.execute("SHOW lock_timeout").fetchone() == ("1s",)
            assert c.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("10s",)
            c.execute("COMMIT")
    assert pg.dump_data() == before


def test_shadow_refuses_prepare_transaction(proxy):
    with connect(proxy, shadow=True) as c:
        c.execute("BEGIN")
        with pytest.raises(psycopg.Error) as err:
            c.execute("PREPARE TRANSACTION 'x'")
        assert err.value.sqlstate == "0A000"


def test_postgres_restart_under_load_then_recovery(pg):
    proxy = Proxy(pg, queue_timeout=2.0)
    stop = threading.Event()
    failures, successes = [], [0]

    def load():
        while not stop.is_set():
            try:
                with connect(proxy) as c:
                    while not stop.is_set():
                        c.execute("SELECT count(*) FROM items")
                        successes[0] += 1
            except psycopg.Error as e:
                failures.append(e)
                time.sleep(0.05)

    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.5)
        pg.restart()
        time.sleep(0.5)
        before = successes[0]
        deadline = time.time() + 15
        while successes[0] == before and time.time() < deadline:
            time.sleep(0.1)
        assert successes[0] > before, "no query succeeded after the restart"
    finally:
        stop.set()
        for t in threads:
            t.join()
        proxy.stop()
    # Every failure was a clear error from the proxy or PostgreSQL, never a hang.
    for e in failures:
        assert e.sqlstate in (None, "08006", "57P01", "57P03", "53300") or "connection" in str(e).lower(), e
    assert pg.backends() <= POOL


def test_shadow_asyncpg_prepared_statements_write_nothing(proxy, pg):
    before = pg.dump_data()

    async def main():
        c = await asyncpg.connect(proxy.url(shadow=True))
        insert = await c.prepare("INSERT INTO items (name) VALUES ($1)")
        await insert.fetch("shadow-prepared")
        async with c.transaction():
            await c.execute("UPDATE items SET n = n + 1000 WHERE id = $1", 3)
            await insert.fetch("shadow-in-transaction")
        await c.executemany("INSERT INTO items (name) VALUES ($1)", [("m",), ("n",)])
        await c.close()

    asyncio.run(main())
    assert pg.dump_data() == before


def test_pin_policy_keeps_the_backend_within_its_bound(pg):
    proxy = Proxy(pg, extra=("--session-state", "pin", "--max-pinned", "1"))
    try:
        with connect(proxy) as pinned, connect(proxy) as other:
            pinned.execute("SET search_path = public")
            for _ in range(3):
                other.execute("SELECT 1")
                assert pinned.execute("SHOW search_path").fetchone() == ("public",)
            with pytest.raises(psycopg.Error) as err:
                other.execute("SET work_mem = '8MB'")
            assert err.value.sqlstate == "0A000" and "pinned" in str(err.value)
            assert other.execute("SELECT 2").fetchone() == (2,)
    finally:
        proxy.stop()


def test_a_deferred_constraint_failing_at_the_wrapped_commit_reaches_the_client(proxy, pg):
    """Regression: the proxy commits an autocommit statement itself (for the ledger); a COMMIT
    that fails must fail the statement, as it would without the proxy."""
    with connect(proxy) as c:
        c.execute("CREATE TABLE deferred (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        c.execute("INSERT INTO deferred VALUES (1)")
        with pytest.raises(psycopg.errors.UniqueViolation):
            c.execute("INSERT INTO deferred VALUES (1)")
        assert c.execute("SELECT count(*) FROM deferred").fetchone() == (1,)


def test_errors_in_prepared_statements_leave_the_client_usable(proxy):
    with connect(proxy) as c:
        for _ in range(3):
            with pytest.raises(psycopg.errors.DivisionByZero):
                c.execute("SELECT 1 / %s::int", (0,))
            assert c.execute("SELECT 1 / %s::int", (1,)).fetchone() == (1,)
        with pytest.raises(psycopg.errors.SyntaxError):
            c.execute("SELEC %s::int", (1,))
        assert c.execute("SELECT %s::int", (5,)).fetchone() == (5,)

    async def main():
        conn = await asyncpg.connect(proxy.url())
        with pytest.raises(asyncpg.DivisionByZeroError):
            async with conn.transaction():
                await conn.execute("UPDATE items SET n = n + 1 WHERE id = 1")
                await conn.fetchval("SELECT 1 / $1::int", 0)
        assert await conn.fetchval("SELECT 1 / $1::int", 1) == 1
        await conn.close()

    asyncio.run(main())


def test_a_newer_protocol_minor_version_is_negotiated_down(proxy):
    with raw(proxy) as s:
        startup = b"user\0kiln\0database\0kiln\0_pq_.future_option\0on\0\0"
        s.sendall(struct.pack("!II", 8 + len(startup), 196608 + 2) + startup)
        tag, length = struct.unpack("!cI", s.recv(5))
        body = s.recv(length - 4)
        assert tag == b"v"
        newest, count = struct.unpack("!II", body[:8])
        assert (newest, count) == (196608, 1) and body[8:] == b"_pq_.future_option\0"
        assert s.recv(1) == b"R"  # then the login goes on in 3.0


def test_copy_from_asyncpg_and_through_the_extended_protocol(proxy, pg):
    """Regressions: asyncpg sends COPY as a query right after an unsynced Parse/Describe/Flush
    and streams its data without waiting; libpq's extended-protocol COPY answers only after the
    Sync that follows CopyDone."""
    pg.psql("CREATE TABLE IF NOT EXISTS copied2 (a int, b text)", user=pg.user)

    async def main(shadow):
        c = await asyncpg.connect(proxy.url(shadow=shadow))
        assert await c.copy_records_to_table("copied2", records=[(1, "x"), (2, "y")]) == "COPY 2"
        out = io.BytesIO()
        await c.copy_from_query("SELECT * FROM copied2 WHERE a > $1", 0, output=out)
        await c.close()
        return out.getvalue()

    assert asyncio.run(main(False)) == b"1\tx\n2\ty\n"
    before = pg.dump_data()
    assert asyncio.run(main(True)) == b"1\tx\n2\ty\n"  # the shadow's COPY was rolled back
    assert pg.dump_data() == before

    with connect(proxy) as c:
        conn = c.pgconn
        conn.send_query_params(b"COPY copied2 FROM STDIN", None)
        result = conn.get_result()
        assert result.status == psycopg.pq.ExecStatus.COPY_IN
        conn.put_copy_data(b"3\tz\n")
        conn.put_copy_end()
        statuses = []
        while (result := conn.get_result()) is not None:
            statuses.append(result.command_status)
        assert statuses == [b"COPY 1"]
        assert c.execute("SELECT count(*) FROM copied2").fetchone() == (3,)


@pytest.mark.parametrize("shadow", [False, True])
def test_cursors_and_pipelines(proxy, shadow):
    async def main():
        c = await asyncpg.connect(proxy.url(shadow=shadow))
        async with c.transaction():
            rows = [r[0] async for r in c.cursor("SELECT g FROM generate_series(1, 500) g", prefetch=50)]
            cur = await c.cursor("SELECT g FROM generate_series(1, 100) g")
            first = await cur.fetch(10)
            await cur.forward(5)
            after = await cur.fetch(3)
        await c.close()
        return len(rows), first[0][0], after[0][0]

    assert asyncio.run(main()) == (500, 1, 16)
    with connect(proxy, shadow=shadow, autocommit=False) as c:
        with c.cursor(name="server_side") as cur:
            cur.itersize = 100
            cur.execute("SELECT g FROM generate_series(1, 1000) g")
            assert sum(1 for _ in cur) == 1000
        c.commit()
    with connect(proxy, shadow=shadow) as c:
        with c.pipeline():
            results = [c.execute("SELECT %s::int", (i,)) for i in range(5)]
        assert [r.fetchone()[0] for r in results] == list(range(5))
