#!/usr/bin/env bash
# The graph-rung profiles again after the capture moved before decode step 1 (device tool, nvidia-h200-x2):
# GPU tests of the rung, graphs at batch 1 / 8 (one GPU), TP 2 graphs at batch 1 / 64, the graphs dilation run.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$ROOT:/tmp/site" PYTHONUNBUFFERED=1 MMPROF_GPU_TESTS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
O=/tmp/o/three; mkdir -p "$O"; M="python3 -m mmprof"
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout "$lim" "$@" > "$O/$name.log" 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t ))s"; tail -3 "$O/$name.log" | cut -c1-200; }
step gpu_tests 120 python3 -m pytest -q -p no:xdist -m gpu tests/runtime/test_gpu.py
SMALL="--preset small --device cuda --prompt-len 512 --decode-steps 8"
for b in 1 8; do
  step graphs_b$b 60 $M run $SMALL --batch $b --baseline --moe-impl grouped --shared-expert fused --graphs \
    -o "$O/graphs_b$b.json.gz" --json
done
for b in 1 64; do
  step tp2_fused_graphs_b$b 80 $M run $SMALL --tp 2 --batch $b --fast --block-reuse 1 --graphs \
    -o "$O/tp2_fused_graphs_b$b.json.gz" --json
done
step dilation_graphs 80 $M run --preset small --device cuda --prompt-len 512 --batch 1 --decode-steps 16 --fast \
  --block-reuse 1 --graphs --measure-dilation --capture light -o "$O/dil_graphs.json.gz" --json
cd /tmp/o && tar -cf - three | split -b 15m - "$OUT/three.tar.part."
