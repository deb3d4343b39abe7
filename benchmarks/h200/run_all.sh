#!/usr/bin/env bash
# Run a batch of the H200 scripts in one device call: `bash benchmarks/h200/run_all.sh NAME...`.
# Each script gets its own output folder and a time limit, so one failure does not cost the whole call;
# each folder comes back as one $OUT/NAME.tar.gz (the device tool returns at most 8 files).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
FINAL=${OUT:-out}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MMPROF_GPU_TESTS=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
limit() { case "$1" in ladder|examples) echo 420;; hf_m3_gpu) echo 540;; decode_kernels) echo 340;; shapes_live|run_dilation) echo 240;; *) echo 180;; esac; }
for name in "$@"; do
  dir="$FINAL/$name"; mkdir -p "$dir"
  echo "=== $name (limit $(limit "$name") s)"
  start=$(date +%s)
  case "$name" in
    gpu_tests) OUT="$dir" timeout "$(limit "$name")" python3 -m pytest -q -p no:xdist -m gpu tests > "$dir/log.txt" 2>&1 ;;
    *) OUT="$dir" timeout "$(limit "$name")" python3 "benchmarks/h200/$name.py" > "$dir/log.txt" 2>&1 ;;
  esac
  rc=$?
  echo "rc=$rc in $(( $(date +%s) - start )) s"; tail -25 "$dir/log.txt"
  tar -czf "$FINAL/$name.tar.gz" -C "$FINAL" "$name" && rm -rf "$dir"
done
