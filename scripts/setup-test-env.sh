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
