#!/bin/bash
# Session of 2026-11-28 (at 93c5245): CUDA smoke check of the current build on an H200; errors against eager and latency.
# Artifacts: python bench/cuda.py compile --out gpu/artifacts --models roberta gpt2 --dtypes float32 float16 --cuda-arch sm_90 (on the CPU host).
export PYTHONUNBUFFERED=1
start=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site gpu/wheels/*.whl || exit 3
export PYTHONPATH=/tmp/site:python
timeout 330 python3 bench/cuda.py run gpu/artifacts --batches 1 8 --check-lengths 1 7 333 --lengths 32 128 --runs 7 --out $OUT/r > $OUT/log.txt 2>&1
echo "rc=$? at $(( $(date +%s) - start )) s" >> $OUT/log.txt
tail -30 $OUT/log.txt
