#!/usr/bin/env bash
# kiln's whole test suite: what `make test` and CI run.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
    echo "kiln's tests start real sandboxes (namespaces, cgroups) and must run as root" >&2
    exit 1
fi

# A clean checkout gains nothing from incremental compilation, and its caches double the size of
# target/ (tens of gigabytes across the workspace's test binaries).
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL=0
fi

step "test environment"
./scripts/setup-test-env.sh

step "rustfmt"
cargo fmt --all -- --check

step "clippy (warnings are errors)"
RUSTFLAGS="-D warnings" cargo clippy --workspace --all-targets --quiet -- -D warnings

step "build"
RUSTFLAGS="-D warnings" cargo build --workspace --quiet

step "unit tests"
RUSTFLAGS="-D warnings" cargo test --workspace --quiet

step "integration tests (real kiln, real sandboxes, boto3, the AWS CLI)"
.venv/bin/python -m pytest -q -p no:cacheprovider --timeout 600 runtimes/test_shims.py tests

step "the S3 suite again, through the object cache (transparency: same answers, bytes and ETags)"
KILN_OBJECT_CACHE=on .venv/bin/python -m pytest -q -p no:cacheprovider --timeout 600 \
    tests/s3/test_s3_api.py tests/s3/test_s3_integrity.py tests/s3/test_s3_multipart.py tests/s3/test_s3_auth.py \
    tests/s3/test_s3_functions.py tests/s3/test_s3_cli.py tests/s3/test_s3_js.py tests/s3/test_s3_conformance.py \
    tests/s3/test_s3_requests.py tests/s3/test_s3_cors.py \
    tests/s3/test_s3_versioning.py
