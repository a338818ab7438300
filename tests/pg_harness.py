"""A private PostgreSQL cluster for tests: Debian's PostgreSQL 15, run as the `postgres` user
(PostgreSQL refuses to run as root) in a temporary directory on a free port.

    pg = Postgres().start()        # role `kiln` with a SCRAM password, database `kiln`
    pg.psql("CREATE TABLE t (a int)")
    pg.restart(); pg.stop(); pg.cleanup()
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def pg_bindir():
    """The newest installed server's bin directory, or None."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    for d in reversed(dirs):
        if os.path.exists(os.path.join(d, "postgres")):
            return d
    return None


def unavailable_reason():
    """Why a cluster cannot be started here, or None if it can."""
    if pg_bindir() is None:
        return "PostgreSQL server binaries are not installed (scripts/setup-test-env.sh installs them)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user to run the server as"
    if os.geteuid() != 0:
        return "starting a cluster as the postgres user needs root"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    def __init__(self, user="kiln", password="kiln-test-password", database="kiln", max_connections=30,
                 port=None, settings=None):
        self.user = user
        self.password = password
        self.database = database
        self.max_connections = max_connections
        self.port = port or free_port()
        self.settings = settings or {}
        self.bindir = pg_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        pw = pwd.getpwnam("postgres")
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        os.chmod(self.dir, 0o700)

    @property
    def host(self):
        return "127.0.0.1"

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def url(self, host=None, port=None, user=None, password=None, database=None):
        return (f"postgresql://{user or self.user}:{password or self.password}@{host or self.host}"
                f":{port or self.port}/{database or self.database}")

    def _as_postgres(self, args, **kwargs):
        return subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True,
                              capture_output=True, text=True, **kwargs)

    def _bin(self, name):
        return os.path.join(self.bindir, name)

    def start(self):
        if not self.data.exists():
            self._as_postgres([self._bin("initdb"), "-D", str(self.data), "-U", "postgres",
                               "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                               "--locale=C.UTF-8"])
            conf = {
                "port": self.port,
                "listen_addresses": "'127.0.0.1'",
                "unix_socket_directories": f"'{self.dir}'",
                "max_connections": self.max_connections,
                "password_encryption": "'scram-sha-256'",
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "shared_buffers": "'32MB'",
                **self.settings,
            }
            with open(self.data / "postgresql.conf", "a") as f:
                for k, v in conf.items():
                    f.write(f"{k} = {v}\n")
            self._pg_ctl("start")
            pw = self.password.replace("'", "''")
            self.psql(f"CREATE ROLE {self.user} LOGIN PASSWORD '{pw}'", database="postgres")
            self.psql(f"CREATE DATABASE {self.database} OWNER {self.user}", database="postgres")
        else:
            self._pg_ctl("start")
        return self

    def _pg_ctl(self, action, mode="fast"):
        args = [self._bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60"]
        if action in ("stop", "restart"):
            args += ["-m", mode]
        self._as_postgres(args + [action])

    def stop(self, mode="fast"):
        self._pg_ctl("stop", mode)

    def restart(self, mode="fast"):
        self._pg_ctl("restart", mode)

    def psql(self, sql, database=None, user="postgres"):
        """Runs SQL as the superuser over the cluster's Unix socket; returns unaligned rows."""
        out = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.dir), "-p", str(self.port),
             "-U", user, "-d", database or self.database, "-c", sql],
            check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def backends(self, user=None):
        """Client backends of `user` (the test role by default) in pg_stat_activity."""
        return int(self.psql(
            f"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            f"AND usename = '{user or self.user}'"))

    def dump_data(self):
        """A data-only dump of the test database, sequences aside."""
        out = subprocess.run(
            [self._bin("pg_dump"), "--data-only", "--no-owner", "-h", str(self.dir), "-p", str(self.port),
             "-U", "postgres", self.database],
            check=True, capture_output=True, text=True).stdout
        return "\n".join(line for line in out.splitlines()
                         if "pg_catalog.setval" not in line and not line.startswith(("--", "\\restrict", "\\unrestrict")))

    def cleanup(self):
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
