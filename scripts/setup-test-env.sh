#!/usr/bin/env bash
# Installs what kiln's tests need on a fresh machine: a Python venv with boto3, awslambdaric,
# pytest and the AWS CLI, the C toolchain for WASI guests, and PostgreSQL for the database
# proxy's tests, etcd and protoc for cluster mode, Chromium and its driver for the console's
# browser tests, helm for the Kubernetes chart's. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
# The wasm runtime's C guest fixture (crates/kiln-wasm/tests/fixtures/build.sh): clang, lld
# and wasi-libc from the distribution. Go (GOOS=wasip1) builds the other guests.
if ! { command -v clang && command -v wasm-ld && [ -d /usr/lib/wasm32-wasi ]; } >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            clang lld wasi-libc libclang-rt-dev-wasm32 >/dev/null
    else
        echo "setup-test-env: clang, lld and wasi-libc are missing; the C wasm fixture will be skipped" >&2
    fi
fi
# Cluster mode: its tests start a 3-member etcd (tests/cluster_harness.py), and the etcd-client
# crate compiles etcd's protocol buffers with protoc. Unlike the fixtures above, nothing is
# skipped without them: the build needs protoc, and the cluster tests fail rather than skip.
if ! { command -v etcd && command -v etcdctl && command -v protoc; } >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client protobuf-compiler >/dev/null
    else
        echo "setup-test-env: etcd and protoc are missing and cannot be installed (needs root and apt-get)" >&2
        exit 1
    fi
fi
# The database proxy's tests and benchmark start a private cluster of the distribution's
# PostgreSQL (tests/pg_harness.py); pgbench ships with the server package, PgBouncer is the
# benchmark's baseline (bench/dbproxy).
if ! { ls /usr/lib/postgresql/*/bin/postgres && command -v pgbouncer; } >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib pgbouncer >/dev/null
    else
        echo "setup-test-env: PostgreSQL or PgBouncer is missing; the database proxy's tests will be skipped" >&2
    fi
fi
# The console's browser tests (tests/console) drive the distribution's headless Chromium
# through chromedriver with Selenium (from the venv, below); like the cluster's, they fail
# rather than skip without it.
if ! { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "setup-test-env: chromium and chromium-driver are missing and cannot be installed (needs root and apt-get)" >&2
        exit 1
    fi
fi
# The Kubernetes manifests' tests (tests/deploy) lint and render the Helm chart: helm, built from
# its Go module (≈ 11 minutes on 2 cores with empty Go caches) into a cache in $HOME that every
# checkout of the machine shares (tests/deploy looks there). `go version -m` reads the version
# the binary was built from, so a binary already there costs no build.
HELM_VERSION=v3.22.0
TOOLS_BIN="${KILN_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln-tools}/bin"
GO=$(command -v go || echo /usr/local/go/bin/go)
if ! "$GO" version -m "$TOOLS_BIN/helm" 2>/dev/null | grep -q "mod[[:space:]]*helm.sh/helm/v3[[:space:]]*$HELM_VERSION"; then
    if [ -x "$GO" ]; then
        GOBIN="$TOOLS_BIN" "$GO" install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    else
        echo "setup-test-env: go is missing: helm cannot be built, and the chart's tests fail under CI" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import boto3, awslambdaric, pytest, awscli, hypothesis, django, psycopg, asyncpg, selenium" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
fi
# The object store's tests: moto's S3 server (the third-party remote), pinned to the venv's
# boto3/botocore, and the AWS SDK for JavaScript v3 (tests/js/package-lock.json).
if ! .venv/bin/python -c "import moto.server, flask_cors" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check -c <(.venv/bin/pip freeze) \
        "moto[s3]==5.2.5" "flask==3.1.3" "flask-cors==6.0.5"
fi
if [ ! -d tests/js/node_modules/@aws-sdk/client-s3 ]; then
    (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
# The AWS SDKs the runtimes provide (runtimes/sdk), where `kiln up` looks for them by default.
./scripts/install-runtime-sdk.sh
# The web adapter's tests: an Express 5 app with its own package-lock (tests/web/express), zipped with its
# node_modules into the test function. Flask comes from the venv (above).
if [ ! -d tests/web/express/node_modules/express ]; then
    (cd tests/web/express && npm ci --no-audit --no-fund --loglevel=error)
fi
# The burst tests' and the benchmark's Express 5 + pg app, with its own package-lock
# (bench/beehive/app/express): the monolith runs it with node, the function is the same directory.
if [ ! -d bench/beehive/app/express/node_modules/pg ]; then
    (cd bench/beehive/app/express && npm ci --no-audit --no-fund --loglevel=error)
fi
# The burst tests' and the benchmark's Mezzanine site (bench/beehive/app/mezzanine): its pinned
# packages vendored beside it (site-packages/, git-ignored), which the monolith (gunicorn) and the
# web function, the same directory, both import.
MEZZ=bench/beehive/app/mezzanine
if ! cmp -s "$MEZZ/requirements.txt" "$MEZZ/site-packages/.requirements"; then
    rm -rf "$MEZZ/site-packages"
    .venv/bin/pip install --quiet --disable-pip-version-check --no-compile --target "$MEZZ/site-packages" \
        -r "$MEZZ/requirements.txt"
    cp "$MEZZ/requirements.txt" "$MEZZ/site-packages/.requirements"
fi
