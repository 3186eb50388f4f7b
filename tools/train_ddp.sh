#!/usr/bin/env bash
# Data-parallel training of one morphology: tools/train_ppo.py under torchrun, one rank per GPU
# (or per CPU core on a machine without GPUs).
#
#   tools/train_ddp.sh [--gpus N | --nproc N] [--nnodes M --node-rank K --master HOST:PORT] [--dry-run] \
#       TRAIN_PPO_ARGS...
#
#   --gpus N     N ranks, one per visible GPU (CUDA_VISIBLE_DEVICES decides which); adds DEVICE cuda
#                before your KEY VALUE overrides (yours win). Default: every visible GPU.
#   --nproc N    N CPU ranks (gloo), whatever the GPUs; adds DEVICE cpu before your overrides.
#                Default without GPUs: every usable core.
#   --nnodes M --node-rank K --master HOST:PORT
#                M machines; run the same command on each with its K (0 on HOST). The output
#                folder should be shared (rank 0 writes it; every rank reads the MJCF).
#   --dry-run    print the torchrun command and exit.
#
# Everything else goes to tools/train_ppo.py (see its --help): e.g.
#   tools/train_ddp.sh --gpus 4 --genome best.json --cfg configs/gpu_server.yml --out output/best
#   tools/train_ddp.sh --gpus 4 --genome best.json --cfg configs/gpu_server.yml --out output/best --resume
# PPO.NUM_ENVS is per rank; PPO.MAX_STATE_ACTION_PAIRS is the total over all ranks. Ctrl-C (or
# SIGTERM) stops every rank after its iteration with a checkpoint; exit code 130 (143), as every tool.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi

die() { echo "error: $*" >&2; exit 2; }
is_count() { [[ "$1" =~ ^[0-9]+$ ]]; }

gpus="" nproc="" nnodes=1 node_rank=0 master="" dry_run=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --gpus) [[ $# -ge 2 ]] && is_count "$2" || die "--gpus needs a count"; gpus="$2"; shift 2 ;;
        --nproc) [[ $# -ge 2 ]] && is_count "$2" || die "--nproc needs a count"; nproc="$2"; shift 2 ;;
        --nnodes) [[ $# -ge 2 ]] && is_count "$2" || die "--nnodes needs a count"; nnodes="$2"; shift 2 ;;
        --node-rank) [[ $# -ge 2 ]] && is_count "$2" || die "--node-rank needs a number"; node_rank="$2"; shift 2 ;;
        --master) [[ $# -ge 2 ]] || die "--master needs HOST:PORT"; master="$2"; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
[[ -n "$gpus" && -n "$nproc" ]] && die "give --gpus or --nproc, not both"

device_args=()
visible=0
if [[ -z "$nproc" ]]; then  # torch counts the GPUs as the ranks will see them (CUDA_VISIBLE_DEVICES)
    visible=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
fi
if [[ -n "$nproc" ]]; then
    ranks="$nproc"
    device_args=(DEVICE cpu)
elif [[ -n "$gpus" || "$visible" -gt 0 ]]; then
    ranks="${gpus:-$visible}"
    [[ "$ranks" -le "$visible" ]] || die "--gpus $ranks but $visible GPU(s) visible (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
    device_args=(DEVICE cuda)
else
    ranks=$("$PY" -c "import os; print(len(os.sched_getaffinity(0)))")
fi
[[ "$ranks" -ge 1 ]] || die "need at least one rank"

if [[ "$nnodes" -gt 1 ]]; then
    [[ "$master" == *:* ]] || die "--nnodes $nnodes needs --master HOST:PORT"
    launch=(--nnodes "$nnodes" --node_rank "$node_rank" --master_addr "${master%:*}" --master_port "${master##*:}")
else
    launch=(--standalone)
fi

command=("$PY" -m torch.distributed.run "${launch[@]}" --nproc_per_node "$ranks"
         "$ROOT/tools/train_ppo.py" "${device_args[@]}" "$@")
if [[ "$dry_run" -eq 1 ]]; then
    printf '%q ' "${command[@]}"; echo
    exit 0
fi
# One torch thread per rank unless asked otherwise (torchrun would also set this, with a warning).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Ctrl-C or SIGTERM: torchrun's agent would print a traceback for the signal, and one for any rank
# that exits nonzero. So the agent runs in its own session (the terminal's Ctrl-C reaches this
# script only), the signal goes to the ranks, which stop after their iteration with a checkpoint and
# exit 0 (DERL_RANK_STOP_EXIT), and this script exits 128 + N like every derl command.
export DERL_RANK_STOP_EXIT=0
setsid "${command[@]}" &
agent=$!
signal=0
forward() { signal=$1; pkill "-$1" -P "$agent" || kill -TERM "$agent" 2>/dev/null || true; }  # no rank yet: stop torchrun
trap 'forward 2' INT
trap 'forward 15' TERM HUP  # a closed terminal stops the ranks as SIGTERM does
while :; do
    code=0
    wait "$agent" || code=$?
    kill -0 "$agent" 2>/dev/null || break  # wait returns early when a signal arrives: wait again
done
(( signal == 0 )) || exit $((128 + signal))  # rank 0 said where its checkpoint is
exit "$code"
