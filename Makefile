# kiln's entry points. `make up` and `make test` are the two set-up commands of the README.

.PHONY: up build test lint unit integration bench bench-startpaths clean

# Build kiln (release) and start it with the demo function `hello` deployed.
up:
	./scripts/setup-build-env.sh
	./scripts/install-runtime-sdk.sh
	cargo build --release
	./target/release/kiln up --demo

build:
	./scripts/setup-build-env.sh
	cargo build

# Everything CI runs: formatting, lints, unit tests, integration tests against a real kiln.
test:
	./scripts/test.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

unit:
	cargo test --workspace

integration: build
	./scripts/setup-test-env.sh
	.venv/bin/python -m pytest -q runtimes/test_shims.py tests

# The invoke hot-path benchmark (release build, several minutes; not part of CI).
bench:
	./bench/run.sh

# Start paths (coldest vs hot) against the Prebaking/SEUSS thesis (release build, ~25 min).
bench-startpaths:
	./bench/startpaths/run.sh

clean:
	cargo clean
	rm -rf .venv .kiln bench/work
