#!/bin/bash
# Issue 41, second GPU run: the artifacts run 1 did not reach, an IREE option tried, inductor.
export PYTHONUNBUFFERED=1
start=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site gpu/wheels/*.whl || exit 3
export PYTHONPATH=/tmp/site:python
step() {
  name=$1; limit=$2; shift 2
  timeout $limit python3 bench/cuda.py run "$@" --out $OUT/$name 2>&1 | grep -v "Warning\|return cls" >> $OUT/log.txt
  echo "== $name rc=${PIPESTATUS[0]} at $(( $(date +%s) - start )) s" | tee -a $OUT/log.txt
}
step rest 95 gpu/rest --lengths 32 128 333 512 --runs 7 --inductor
step flag 75 gpu/flagged --check-lengths 1 7 333 --lengths 128 512 --runs 7 --inductor
step ind $(( 265 - ($(date +%s) - start) )) gpu/ind --check-lengths 7 --lengths 32 128 333 512 --runs 7 --inductor roberta gpt2
tail -40 $OUT/log.txt
