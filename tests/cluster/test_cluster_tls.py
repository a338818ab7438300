"""Cluster mode against an etcd that serves its clients over TLS only, asks them for a client
certificate (`--client-cert-auth`) and has auth on, its tokens living 3 s (tests/cluster_harness.py's
`tls=True, auth=True`): two nodes share functions; a node without the CA, without a client
certificate or with a wrong password does not start, and says why; the password shows nowhere;
the nodes keep working once their tokens have expired. Then, with etcd's JWT tokens, past their
expiry and past an auth change, which makes every token issued before it stale."""

import subprocess
import time

import pytest

from cluster_harness import KILN_PASSWORD, Cluster

TOKEN_TTL = 3
BOUND = 30
# A node that cannot reach etcd gives up in this long (5 tries of at most 2 s to connect).
START_BOUND = 40


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=2, tls=True, auth=True, etcd_args=["--auth-token-ttl", str(TOKEN_TTL)]) as c:
        yield c



def create_here_run_there(cluster, name, marker):
    created = cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker=marker)
    assert "error" not in created, created
    cluster.wait_for(lambda: cluster.answer("n2", name) == marker, BOUND, what=f"{name} on n2")


def start_refused(cluster, tmp_path, change_args=lambda args: args, env=None):
    """`kiln up` as a third node with changed flags or environment: its exit code and stderr,
    which must come within START_BOUND."""
    args = cluster.node_args("n1")
    args[args.index("--node-id") + 1] = "intruder"
    args[args.index("--data-dir") + 1] = str(tmp_path / "data")
    started = time.time()
    result = subprocess.run(cluster.enter("n1") + change_args(args), capture_output=True, text=True,
                            timeout=START_BOUND + 20, env={**cluster.node_env(), **(env or {})})
    assert time.time() - started < START_BOUND, result.stderr
    return result.returncode, result.stderr


def without(args, *flags):
    for flag in flags:
        at = args.index(flag)
        del args[at:at + 2]
    return args


def test_nodes_share_functions_over_tls_with_client_certificates_and_auth(cluster):
    for node in ("n1", "n2"):
        cluster.wait_for(lambda: cluster.states(node) == {"n1": "up", "n2": "up"}, BOUND,
                         what=f"both nodes up as {node} sees them")
    status = cluster.status("n2")
    assert [e["endpoint"].split("://")[0] for e in status["etcd"]] == ["https"] * 3, status["etcd"]
    assert all(e["healthy"] for e in status["etcd"])
    create_here_run_there(cluster, "over-tls", "v1")
    # What kiln wrote is under its prefix, which is all its etcd user may touch.
    assert cluster.etcdctl("get", "--prefix", "--keys-only", "/kiln/functions/").stdout.strip()


def test_a_node_without_the_ca_is_refused_at_once(cluster, tmp_path):
    code, stderr = start_refused(cluster, tmp_path, lambda args: without(args, "--cluster-ca"))
    assert code != 0
    assert "--cluster-ca" in stderr and "https://" in stderr, stderr


def test_a_node_without_a_client_certificate_is_refused(cluster, tmp_path):
    code, stderr = start_refused(cluster, tmp_path, lambda args: without(args, "--cluster-cert", "--cluster-key"))
    assert code != 0
    assert "cannot talk to etcd over TLS" in stderr and "--cluster-cert" in stderr, stderr


def test_a_node_with_a_wrong_password_is_refused(cluster, tmp_path):
    code, stderr = start_refused(cluster, tmp_path, env={"KILN_CLUSTER_PASSWORD": "wrong-password"})
    assert code != 0
    assert "etcd refused --cluster-user `kiln`" in stderr and "authentication failed" in stderr, stderr
    assert "wrong-password" not in stderr


def test_a_node_without_the_password_is_refused(cluster, tmp_path):
    env = cluster.node_env()
    del env["KILN_CLUSTER_PASSWORD"]
    args = cluster.node_args("n1")
    args[args.index("--data-dir") + 1] = str(tmp_path / "data")
    result = subprocess.run(cluster.enter("n1") + args, capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode != 0
    assert "KILN_CLUSTER_PASSWORD" in result.stderr, result.stderr


def test_the_password_shows_nowhere(cluster):
    for node in ("n1", "n2"):
        pid = cluster.procs[node].pid
        # The kiln process itself, not nsenter's: nsenter execs it, keeping the pid.
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        assert "kiln" in argv and "--cluster-user" in argv
        assert KILN_PASSWORD not in argv
        for command in (("--json", "status"), ("--json", "cluster", "status"), ("status",)):
            out = cluster.cli(*command, on=node)
            assert KILN_PASSWORD not in out.stdout + out.stderr
        assert KILN_PASSWORD not in cluster.logs()[node]
    help_text = subprocess.run([str(cluster.node_args("n1")[0]), "up", "--help"], capture_output=True, text=True,
                               env=cluster.node_env()).stdout
    assert "KILN_CLUSTER_PASSWORD" in help_text and KILN_PASSWORD not in help_text


def test_nodes_keep_working_after_their_tokens_expire(cluster):
    """etcd's simple tokens expire on each member TTL seconds after their last use there: an
    etcd member cut off longer than that knows none of the nodes' tokens when it comes back (its
    health check's client and the shared one send it requests again). The nodes authenticate
    again: the member is healthy again for every node, and the nodes keep working through it."""
    cluster.partition("e1")
    try:
        time.sleep(TOKEN_TTL * 3)
    finally:
        cluster.heal("e1")
    for node in ("n1", "n2"):
        cluster.wait_for(lambda: all(e["healthy"] for e in cluster.status(node)["etcd"]), BOUND,
                         what=f"every etcd endpoint healthy again as {node} sees it")
    create_here_run_there(cluster, "after-ttl", "v2")
    for node in ("n1", "n2"):
        assert cluster.states(node) == {"n1": "up", "n2": "up"}
        assert cluster.procs[node].poll() is None


def test_a_node_starts_while_an_etcd_member_is_cut_off(cluster):
    """Connecting with a user authenticates: the shared client through any member, each health
    check's client through its own member, which it connects to once that member answers."""
    assert cluster.stop("n2") == 0
    cluster.partition("e1")
    try:
        cluster.start_node("n2")
        cluster.wait_for(lambda: [e["healthy"] for e in cluster.status("n2")["etcd"]] == [False, True, True],
                         BOUND, what="e1 unhealthy, the others healthy, as n2 sees them")
        create_here_run_there(cluster, "member-cut-off", "v4")
    finally:
        cluster.heal("e1")
    cluster.wait_for(lambda: all(e["healthy"] for e in cluster.status("n2")["etcd"]), BOUND,
                     what="e1 healthy again as n2 sees it")


def test_with_jwt_tokens_nodes_keep_working_past_their_expiry_and_an_auth_change(tmp_path):
    """JWT tokens expire TTL after they were issued, used or not, and carry the auth store's
    revision: a user added to etcd makes every token issued before refused ("revision of auth
    store is old", which etcd-client does not refresh on; kiln does)."""
    private, public = tmp_path / "jwt.key", tmp_path / "jwt.pub"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-out", str(private)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)], check=True,
                   capture_output=True)
    jwt = f"jwt,pub-key={public},priv-key={private},sign-method=ES256,ttl={TOKEN_TTL}s"
    with Cluster(nodes=2, tls=True, auth=True, etcd_args=["--auth-token", jwt]) as jwt_cluster:
        create_here_run_there(jwt_cluster, "jwt-first", "v1")
        time.sleep(TOKEN_TTL * 3)
        create_here_run_there(jwt_cluster, "jwt-after-ttl", "v2")
        jwt_cluster.etcdctl("user", "add", "someone-else:Other-Pa55")
        create_here_run_there(jwt_cluster, "jwt-after-auth-change", "v3")
        for node in ("n1", "n2"):
            jwt_cluster.wait_for(lambda: all(e["healthy"] for e in jwt_cluster.status(node)["etcd"]), BOUND,
                                 what=f"every etcd endpoint healthy as {node} sees it")
            assert jwt_cluster.states(node) == {"n1": "up", "n2": "up"}


def test_tls_without_auth_and_a_node_without_a_client_certificate(tmp_path):
    """TLS alone: connecting does not authenticate, so the node's first request is what finds
    out that etcd refuses it."""
    with Cluster(nodes=1, tls=True) as tls_only:
        tls_only.wait_for(lambda: all(e["healthy"] for e in tls_only.status("n1")["etcd"]), BOUND,
                          what="every etcd endpoint healthy")
        assert "--cluster-user" not in tls_only.node_args("n1")
        code, stderr = start_refused(tls_only, tmp_path, lambda args: without(args, "--cluster-cert", "--cluster-key"))
        assert code != 0
        assert "cannot talk to etcd over TLS" in stderr, stderr
