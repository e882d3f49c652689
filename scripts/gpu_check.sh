#!/usr/bin/env bash
# GPU readiness check (minutes): on a CUDA machine, the sections of scripts/gpu_check.py (versions + generate, device
# noise, bounded scoring, ES, ES on one vLLM engine, GRPO at the preset's micro-batch, GRPO on vLLM, two Ray + vLLM
# actors on one GPU with one killed, evaluation, ES's centre on vLLM at 2048 tokens, vLLM sleep/wake, the CUDA IPC
# weight sync, GRPO on vLLM under torchrun with 2 processes, ray-vllm over every visible GPU at N = 8 for two
# iterations) of the paper-easy preset on a random Qwen2 in bfloat16, first the tiny shape (plumbing), then
# Qwen2.5-1.5B's architecture and vocabulary (realistic time and memory); prints times and peak GPU memory.
# Usage: scripts/gpu_check.sh [extra gpu_check.py arguments, e.g. --no-ray, --max-new-tokens 64, --time-limit 1800]
# Each shape's run stops at --time-limit (default 3600 s). A section skipped because vllm or ray is missing fails
# the check unless named in --allow-skip or GPU_CHECK_ALLOW_SKIP (e.g.
# GPU_CHECK_ALLOW_SKIP=es-vllm,grpo-vllm,ray-vllm-kill,centre,sleep-wake,ipc-sync,torchrun,ray-vllm on a box
# without the GPU extras).
# PYTHON picks the interpreter (default .venv/bin/python when present, else python3); RESULTS a folder for the
# JSON results (default: none written).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: nvidia-smi not found: this is no CUDA machine (run 'python scripts/gpu_check.py --device cpu' to check the code path on a CPU)" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: $PYTHON's torch sees no CUDA device (torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed')); install a CUDA build of torch (make setup does on a machine with nvidia-smi)" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # Ray's workers import esreason_lib from here too
status=0
for shape in tiny qwen2.5-1.5b; do
    json=()
    if [[ -n "${RESULTS:-}" ]]; then mkdir -p "$RESULTS"; json=(--json "$RESULTS/gpu_check_$shape.json"); fi
    tokens=(); [[ $shape == qwen2.5-1.5b ]] && tokens=(--max-new-tokens 512)  # the preset's budget at full shape
    "$PYTHON" scripts/gpu_check.py --device cuda --shape "$shape" "${tokens[@]}" "${json[@]}" "$@" || status=1
done
exit $status
