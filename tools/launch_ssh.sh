#!/usr/bin/env bash
# One evolution search on several machines over ssh: node K runs on the K-th host of HOSTS_FILE.
#
#   tools/launch_ssh.sh HOSTS_FILE [--cfg FILE] [KEY VALUE ...]
#   tools/launch_ssh.sh hosts.txt --cfg configs/evo/ft.yml OUT_DIR /shared/ft
#
# HOSTS_FILE: one host per line (ssh destinations: host or user@host); blank lines and # comments
# are skipped. Node K gets NODE_ID K NUM_NODES <number of hosts>; the other arguments go to
# evo_single_proc.py unchanged. Every host must see this checkout at the same path (or DERL_ROOT)
# with its .venv (`make setup`), and OUT_DIR must be on a filesystem all hosts share.
# Node K logs to $DERL_LOG_DIR/node-K.log (default: logs/ssh-<date>/). The launcher waits for every
# node and exits with the highest of their exit codes (docs/reference/commands.md#exit-codes); a node that failed has
# the last $DERL_LOG_LINES (5) lines of its log shown under its exit line. Stop the whole search
# with `touch OUT_DIR/STOP`; rerun the same command to resume. DERL_SSH replaces `ssh` (e.g. with
# options, or for tests).
set -euo pipefail

die() { echo "error: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: tools/launch_ssh.sh HOSTS_FILE [--cfg FILE] [KEY VALUE ...] (see --help)"
if [[ "$1" == "-h" || "$1" == "--help" ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
[[ "$1" != -* ]] || die "unknown option $1: the hosts file comes first (see --help)"
hosts_file="$1"; shift
[[ -f "$hosts_file" ]] || die "hosts file not found: $hosts_file"
mapfile -t hosts < <(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$hosts_file" | grep -v '^$' || true)
[[ ${#hosts[@]} -ge 1 ]] || die "no hosts in $hosts_file"

ROOT="${DERL_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
LOG_DIR="${DERL_LOG_DIR:-logs/ssh-$(date +%Y%m%d-%H%M%S)}"
read -r -a SSH <<< "${DERL_SSH:-ssh -o BatchMode=yes}"
mkdir -p "$LOG_DIR"

pids=()
for k in "${!hosts[@]}"; do
    remote=$(printf '%q ' cd "$ROOT")"&& exec "$(printf '%q ' "$PY" evo_single_proc.py "$@" \
        NODE_ID "$k" NUM_NODES "${#hosts[@]}")
    "${SSH[@]}" "${hosts[$k]}" "$remote" < /dev/null > "$LOG_DIR/node-$k.log" 2>&1 &
    pids+=($!)
    echo "node $k on ${hosts[$k]}: log $LOG_DIR/node-$k.log"
done

worst=0
for k in "${!pids[@]}"; do
    code=0
    wait "${pids[$k]}" || code=$?
    echo "node $k on ${hosts[$k]} exited with code $code"
    if (( code != 0 )); then  # the cause is in the node's log (ssh's own errors too): show its end
        tail -n "${DERL_LOG_LINES:-5}" "$LOG_DIR/node-$k.log" | sed "s/^/  node $k: /"
    fi
    (( code > worst )) && worst=$code
done
exit "$worst"
