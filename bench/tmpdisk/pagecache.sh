#!/usr/bin/env bash
# Does writing to a loop-backed ext4 /tmp get a small memory cgroup killed? The page cache of the
# file system (and, without direct I/O, of its image too) is charged to the writer's cgroup.
#
#   bench/tmpdisk/pagecache.sh DIRECT_IO(on|off) WRITE_MB LIMIT_MB [HOLD_MB]
#
# Makes an ext4 image as kiln does (tmpdisk.rs), attaches it (losetup --direct-io=DIRECT_IO),
# mounts it, and writes WRITE_MB into it from a Python process in a new memory cgroup limited to
# LIMIT_MB that also holds HOLD_MB (default 80) of its own; prints the time taken, the cgroup's
# peak, its failcnt and its OOM kills. cgroup v1 (the memory hierarchy at
# /sys/fs/cgroup/memory); run as root. Cleans up after itself.
set -euo pipefail
DIO=$1 WRITE_MB=$2 LIMIT_MB=$3 HOLD_MB=${4:-80}
WORK=$(mktemp -d /var/tmp/kiln-pagecache.XXXXXX)
CG=/sys/fs/cgroup/memory/kiln-pagecache-$$
DEV=
cleanup() {
    umount "$WORK/mnt" 2>/dev/null || true
    [ -n "$DEV" ] && losetup -d "$DEV" 2>/dev/null || true
    rmdir "$CG" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
truncate -s $((WRITE_MB + 64))M "$WORK/img"
mkfs.ext4 -q -F -m 0 -i 65536 -O ^has_journal,^resize_inode "$WORK/img"
DEV=$(losetup -f --show --direct-io="$DIO" "$WORK/img")
mkdir "$WORK/mnt" && mount -o nosuid,nodev "$DEV" "$WORK/mnt"
mkdir "$CG"
echo $((LIMIT_MB << 20)) > "$CG/memory.limit_in_bytes"
echo 0 > "$CG/memory.swappiness"
start=$(date +%s.%N)
if sh -c "echo \$\$ > $CG/cgroup.procs; exec python3 -c '
import os
hold = bytearray($HOLD_MB << 20)
chunk = os.urandom(1 << 20)
for n in range(4):
    with open(\"$WORK/mnt/f%d\" % n, \"wb\") as f:
        for _ in range($WRITE_MB // 4):
            f.write(chunk)
'"; then outcome=ok; else outcome="killed (rc $?)"; fi
end=$(date +%s.%N)
printf 'direct-io=%s write=%s MB limit=%s MB hold=%s MB: %s in %.2f s, peak %s MB, failcnt %s, oom kills %s\n' \
    "$DIO" "$WRITE_MB" "$LIMIT_MB" "$HOLD_MB" "$outcome" "$(echo "$end - $start" | bc)" \
    $(( $(cat "$CG/memory.max_usage_in_bytes") >> 20 )) "$(cat "$CG/memory.failcnt")" \
    "$(awk '/oom_kill /{print $2}' "$CG/memory.oom_control")"
