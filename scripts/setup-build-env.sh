#!/usr/bin/env bash
# What building kiln needs beyond the Rust toolchain: protoc, with which the etcd client crate
# compiles etcd's protocol buffers (cluster mode). Idempotent; run by `make up`, `make build`,
# the test setup and the benchmarks before they build.
set -euo pipefail
command -v protoc >/dev/null 2>&1 && exit 0
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
else
    echo "setup-build-env: protoc is missing and cannot be installed (needs root and apt-get); install protobuf-compiler" >&2
    exit 1
fi
