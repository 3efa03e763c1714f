#!/bin/bash
# The GPU machine's part of issue 41: bench/cuda.py run over the carried artifacts.
export PYTHONUNBUFFERED=1
start=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; lscpu | grep -m1 "Model name"; nproc; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site gpu/wheels/*.whl || exit 3
export PYTHONPATH=/tmp/site:python
python3 -c "import torch, transformers, iree.runtime as rt; print('torch', torch.__version__, 'transformers', transformers.__version__, 'iree cuda devices', rt.get_driver('cuda').query_available_devices())" 2>&1 | tail -3
echo "setup $(( $(date +%s) - start )) s"
timeout 110 python3 bench/cuda.py run gpu/sm80 --out $OUT/sm80 --batches 1 8 --check-lengths 1 7 333 --lengths 128 --runs 20 --inductor 2>&1 | grep -v "Warning\|return cls" > $OUT/sm80.log
tail -8 $OUT/sm80.log
echo "sm80 done $(( $(date +%s) - start )) s"
timeout $(( ${BUDGET:-500} - ($(date +%s) - start) )) python3 bench/cuda.py run gpu/artifacts --out $OUT --deadline-s ${DEADLINE:-280} 2>&1 | grep -v "Warning\|return cls" > $OUT/log.txt
echo "rc=$? all done $(( $(date +%s) - start )) s"
tail -70 $OUT/log.txt
