#!/usr/bin/env bash
# The graph rung and the two-GPU runs on an H200 host (device tool, kind nvidia-h200-x2), in two calls:
#   bash benchmarks/h200/graphs_tp2.sh one    # GPU tests, the ladder (small, batch 1/8/64) with graph rungs,
#                                             # the fused / graphs example pair (batch 1 and 8) and their diffs
#   bash benchmarks/h200/graphs_tp2.sh two    # TP 2 on NCCL: run (batch 1 / 64, fused / separate, graphs on / off),
#                                             # record under torchrun, shapes --live --device cuda, verify, diff;
#                                             # the capture-mode dilation table (full / light / kernels, +- graphs)
# Everything lands in /tmp/o, then goes to $OUT as a tar split in 15 MB parts (the tool returns files <= 16 MiB).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$ROOT:/tmp/site" PYTHONUNBUFFERED=1 MMPROF_GPU_TESTS=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=/tmp/o/$1; mkdir -p "$O"
M="python3 -m mmprof"
step() {  # step NAME LIMIT CMD...: run with a time limit, log to $O/NAME.log, print rc and the log's tail
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout "$lim" "$@" > "$O/$name.log" 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t ))s"; tail -4 "$O/$name.log" | cut -c1-200
}
SMALL="--preset small --device cuda --prompt-len 512"
if [ "$1" = one ]; then
  step gpu_tests 170 python3 -m pytest -q -p no:xdist -m gpu tests/runtime/test_gpu.py tests/test_run.py tests/test_shapes_live.py tests/test_record.py
  for b in 1 8; do
    step fused_b$b 90 $M run $SMALL --batch $b --decode-steps 8 --baseline --moe-impl grouped --shared-expert fused \
      -o "$O/fused_b$b.json.gz" --json
    step graphs_b$b 90 $M run $SMALL --batch $b --decode-steps 8 --baseline --moe-impl grouped --shared-expert fused \
      --graphs -o "$O/graphs_b$b.json.gz" --json
    step diff_b$b 60 $M diff "$O/fused_b$b.json.gz" "$O/graphs_b$b.json.gz" --markdown "$O/diff_b$b.md"
    $M diff "$O/fused_b$b.json.gz" "$O/graphs_b$b.json.gz" --json > "$O/diff_b$b.json" 2>&1
    $M report "$O/graphs_b$b.json.gz" --json > "$O/report_graphs_b$b.json" 2>&1
    $M verify-fastpath "$O/graphs_b$b.json.gz" --json > "$O/verify_graphs_b$b.json" 2>&1
  done
  step ladder 260 python3 benchmarks/h200/ladder.py --presets small --batches 1,8,64 --out "$O"
else
  step gpu_tests 150 python3 -m pytest -q -p no:xdist -m gpu tests/runtime/test_gpu.py tests/test_run.py tests/test_shapes_live.py tests/test_record.py
  TP="--preset small --device cuda --tp 2 --prompt-len 512 --decode-steps 8"
  for b in 1 64; do
    for g in eager graphs; do
      gf=""; [ $g = graphs ] && gf="--graphs"
      step tp2_fused_${g}_b$b 100 $M run $TP --batch $b --fast --block-reuse 1 $gf -o "$O/tp2_fused_${g}_b$b.json.gz" --json
    done
  done
  step tp2_separate_eager_b64 100 $M run $TP --batch 64 --fast --block-reuse 1 --shared-expert separate \
    -o "$O/tp2_separate_eager_b64.json.gz" --json
  for f in tp2_fused_eager_b1 tp2_fused_graphs_b1 tp2_fused_eager_b64 tp2_fused_graphs_b64 tp2_separate_eager_b64; do
    $M report "$O/$f.json.gz" --json > "$O/report_$f.json" 2>&1
  done
  $M verify-fastpath "$O/tp2_fused_eager_b64.json.gz" --junit "$O/verify_fused.xml" > "$O/verify_fused.txt" 2>&1; echo "verify fused rc=$?"
  $M verify-fastpath "$O/tp2_separate_eager_b64.json.gz" > "$O/verify_separate.txt" 2>&1; echo "verify separate rc=$?"
  $M diff "$O/tp2_separate_eager_b64.json.gz" "$O/tp2_fused_eager_b64.json.gz" --markdown "$O/diff_separate_fused.md" > /dev/null 2>&1
  $M diff "$O/tp2_fused_eager_b1.json.gz" "$O/tp2_fused_graphs_b1.json.gz" --markdown "$O/diff_tp2_graphs_b1.md" > /dev/null 2>&1
  step tp2_record 150 $M record -o "$O/tp2_record_b64.json.gz" --json -- torchrun --nproc-per-node 2 \
    -m mmprof.runtime.torchrun --preset small --device cuda --batch 64 --prompt-len 512 --decode-steps 8
  step shapes_live 120 $M shapes --live --device cuda --tp 2 --model small --json
  step dilation_eager 100 $M run $SMALL --batch 1 --decode-steps 16 --fast --block-reuse 1 --measure-dilation \
    --capture light -o "$O/dil_eager.json.gz" --json
  step dilation_graphs 100 $M run $SMALL --batch 1 --decode-steps 16 --fast --block-reuse 1 --graphs \
    --measure-dilation --capture light -o "$O/dil_graphs.json.gz" --json
fi
cd /tmp/o && tar -cf - "$1" | split -b 15m - "$OUT/$1.tar.part."
ls -la "$OUT"
