#!/usr/bin/env bash
# Runs ceph/s3-tests' core subset against kiln's object store, as a user would check an S3
# store: directly (a store-only kiln), in remote mode (a second kiln in front of it, cache off)
# and through the object cache (the second kiln with its cache on).
#
#   scripts/s3-conformance.sh S3TESTS_DIR [direct|remote|cache ...]   # default: all three
#   S3TESTS_SELECT="version or cors" scripts/s3-conformance.sh ...      # only tests matching -k
#
# S3TESTS_DIR is a checkout of ceph/s3-tests, kept outside kiln's tree; its requirements go to a
# venv of its own (S3TESTS_DIR/.venv). kiln has one user, so the suite's three ("main", "alt",
# "tenant") share its admin key: tests of what one user may do to another's buckets fail by
# design. The subset leaves out what kiln does not offer (bucket policies, SSE, lifecycle,
# object lock, tagging, IAM, STS, websites, logging, SigV2 headers) and tests
# marked as failing on AWS itself. Results: one line per mode with the counts, and
# S3TESTS_DIR/results-MODE.txt with each failed test and its error.
set -euo pipefail
cd "$(dirname "$0")/.."
suite="$(cd "${1:?usage: $0 S3TESTS_DIR [direct|remote|cache ...]}" && pwd)"
shift
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(direct remote cache)
kiln="${KILN_BIN:-$PWD/target/debug/kiln}"
[ -x "$kiln" ] || cargo build --bin kiln
excluded="lifecycle or lifecycle_expiration or lifecycle_transition or encryption or bucket_encryption
  or sse_s3 or bucket_policy or user_policy or role_policy or session_policy or group_policy or abac_test
  or object_lock or tagging or bucket_logging or bucket_logging_cleanup
  or fails_without_logging_rollover or s3select or s3website or s3website_routing_rules
  or s3website_redirect_location or appendobject or storage_class or cloud_transition or cloud_restore
  or sns or iam_account or iam_cross_account or iam_role or iam_tenant or iam_user or webidentity_test
  or test_of_sts or token_claims_trust_policy_test or token_principal_tag_role_policy_test
  or token_request_tag_trust_policy_test or token_resource_tags_test or token_role_tags_test
  or token_tag_keys_test or object_ownership or auth_aws2 or fails_on_aws"
marker="not ($(echo "$excluded" | tr -s ' \n' ' '))"
# Object lock, bucket policy and public access block tests the suite does not mark as such.
unmarked="object_lock or public_block or block_public or ignore_public_acls or policy"
select="not ($unmarked)${S3TESTS_SELECT:+ and ($S3TESTS_SELECT)}"

if [ ! -x "$suite/.venv/bin/pytest" ]; then
    python3 -m venv "$suite/.venv"
    "$suite/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$suite/requirements.txt" pytest-timeout
fi

work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Starts `kiln up --store-only` with extra flags; sets `port` to its S3 port once it answers.
# Not in a subshell: the process must be in `pids`, to be stopped at the end.
start_store() {
    local name="$1"
    shift
    port="$(free_port)"
    "$kiln" up --store-only --listen "127.0.0.1:0" --s3-listen "127.0.0.1:$port" --data-dir "$work/$name" \
        --no-aws-profile "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        if [ -s "$work/$name/credentials.json" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return
        fi
        sleep 0.1
    done
    echo "s3-conformance: kiln ($name) did not start; its log:" >&2
    cat "$work/$name.log" >&2
    exit 1
}

key() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

start_store backing
backing_port="$port"
backing="$work/backing/credentials.json"
for mode in "${modes[@]}"; do
    case "$mode" in
        direct) port="$backing_port"; creds="$backing" ;;
        remote | cache)
            cache_flag=off
            [ "$mode" = cache ] && cache_flag=on
            KILN_S3_BACKEND_SECRET_KEY="$(key "$backing" secretAccessKey)" start_store "$mode" \
                --s3-backend "http://127.0.0.1:$backing_port" \
                --s3-backend-access-key "$(key "$backing" accessKeyId)" \
                --object-cache "$cache_flag"
            creds="$work/$mode/credentials.json"
            ;;
        *) echo "s3-conformance: unknown mode $mode (direct, remote or cache)" >&2; exit 2 ;;
    esac
    access="$(key "$creds" accessKeyId)"
    secret="$(key "$creds" secretAccessKey)"
    conf="$work/s3tests-$mode.conf"
    {
        printf '[DEFAULT]\nhost = 127.0.0.1\nport = %s\nis_secure = False\nssl_verify = False\n\n' "$port"
        printf '[fixtures]\nbucket prefix = kiln-%s-{random}-\n\n' "$mode"
        for section in "s3 main" "s3 alt" "s3 tenant" iam "iam root" "iam alt root"; do
            printf '[%s]\ndisplay_name = kiln\nuser_id = kiln\nemail = kiln@example.com\ntenant = kiln\n' "$section"
            printf 'access_key = %s\nsecret_key = %s\n\n' "$access" "$secret"
        done
    } >"$conf"
    (cd "$suite" && S3TEST_CONF="$conf" timeout 3600 .venv/bin/pytest -q -p no:cacheprovider --timeout 120 \
        s3tests/functional/test_s3.py -m "$marker" -k "$select" -rf \
        >"$suite/pytest-$mode.txt" 2>&1) || true
    grep -E "^FAILED|^ERROR" "$suite/pytest-$mode.txt" >"$suite/results-$mode.txt" || true
    echo "$mode: $(tail -n 1 "$suite/pytest-$mode.txt")"
done
