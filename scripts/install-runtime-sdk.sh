#!/usr/bin/env bash
# Installs the AWS SDKs that kiln's runtimes provide, as Lambda's runtimes do: boto3 for the
# python runtimes and the AWS SDK for JavaScript v3 for the nodejs runtimes, at the versions
# pinned in runtimes/sdk/. `kiln up` mounts them read-only into every instance, after the
# function's own packages (a function that bundles its own version gets that version).
#
#   scripts/install-runtime-sdk.sh [DIR]    # default: $KILN_RUNTIME_SDK or /usr/local/lib/kiln/runtime-sdk
#
# Layout: DIR/python (on sys.path as /var/runtime), DIR/nodejs/node_modules (as
# /var/runtime/node_modules). Idempotent: nothing is done when DIR already holds these pins
# for this python3. Run by `make up` and the test setup.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${KILN_RUNTIME_SDK:-/usr/local/lib/kiln/runtime-sdk}}"
pins=runtimes/sdk
stamp="$(cat "$pins/requirements.txt" "$pins/package-lock.json" | sha256sum | cut -c1-16) $(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')"
if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
echo "install-runtime-sdk: installing the runtimes' AWS SDKs into $dir"
mkdir -p "$(dirname "$dir")"
work="$(mktemp -d "$(dirname "$dir")/.runtime-sdk.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# pip from a throwaway venv of the same python3 the python runtime uses, so the host's own
# Python installation is left as it is; pip compiles the modules (the runtime writes no .pyc).
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    --target "$work/sdk/python" -r "$pins/requirements.txt"
rm -rf "$work/sdk/python/bin"
mkdir -p "$work/sdk/nodejs"
cp "$pins/package.json" "$pins/package-lock.json" "$work/sdk/nodejs/"
(cd "$work/sdk/nodejs" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >/dev/null)
rm "$work/sdk/nodejs/package.json" "$work/sdk/nodejs/package-lock.json"
echo "$stamp" >"$work/sdk/.stamp"
chmod -R a+rX "$work/sdk"
# Replace the old copy in one rename, so a running kiln never mounts a half-installed SDK.
if [ -e "$dir" ]; then
    mv "$dir" "$work/old"
fi
mv "$work/sdk" "$dir"
echo "install-runtime-sdk: done ($(du -sh "$dir" | cut -f1))"
