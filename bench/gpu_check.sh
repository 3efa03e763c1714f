#!/bin/bash
# The GPU check of target="cuda" (issue 63), run on the GPU machine from the
# repository root with gpu/ beside it, which `make gpu-check` builds here without
# a GPU: gpu/artifacts (roberta-base and GPT-2 small in float32 and float16, and
# GPT-2's compile_generator, weights left out: bench/cuda.py writes them there
# from the same configs and seeds), gpu/wheels (iree-base-runtime for that
# machine's Python) and this script as gpu/run.sh. It ends within 8 minutes:
# errors against eager (float64 decides), latency against eager and
# torch.compile at batch 1 and 8 with L = 7, 32, 128, 333 and 512, GPT-2's
# decode tokens/s against HF eager. Results: $OUT (default ./gpu-results).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
start=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__)"
} > "$OUT/machine.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    gpu/wheels/*.whl || exit 3
export PYTHONPATH=/tmp/site:python
# torch.compile (inductor) runs last and starts no model past 240 s.
timeout 430 python3 bench/cuda.py run gpu/artifacts --batches 1 8 \
    --check-lengths 7 32 128 333 512 --lengths 7 32 128 333 512 --runs 7 \
    --inductor roberta gpt2 --deadline-s 240 --out "$OUT" > "$OUT/log.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - start )) s" >> "$OUT/log.txt"
cat "$OUT/cuda.md" 2>/dev/null
tail -5 "$OUT/log.txt"
