#!/usr/bin/env bash
# pgbench -S through kiln's database proxy, against direct connections and PgBouncer.
# Needs root (the private cluster runs as the postgres user) and scripts/setup-test-env.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup-build-env.sh
cargo build --release -q -p kiln-dbproxy --bin kiln-dbproxy
exec .venv/bin/python bench/dbproxy/bench.py "$@"
