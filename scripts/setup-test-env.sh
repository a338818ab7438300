#!/usr/bin/env bash
# Installs what kiln's tests need on a fresh machine: a Python venv with boto3, awslambdaric,
# pytest and the AWS CLI. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import boto3, awslambdaric, pytest, awscli" 2>/dev/null; then
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
