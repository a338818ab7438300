import pytest

from kiln_harness import Kiln


@pytest.fixture(scope="session")
def kiln():
    """One kiln server shared by the tests of a session."""
    server = Kiln().start()
    yield server
    server.cleanup()


@pytest.fixture
def fresh_kiln():
    """A kiln server of the test's own, for restarts, kills and shutdown."""
    servers = []

    def make(**kwargs):
        server = Kiln(**kwargs).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        # A graceful stop removes the server's sandboxes and cgroups before its data goes.
        try:
            server.stop()
        except Exception:
            server.kill9()
        server.cleanup()
