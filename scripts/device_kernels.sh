#!/usr/bin/env bash
# Device check for docs/base_models.md: the shipped base models and DAPO from them on another machine
# (another CPU, another torch), under each CPU kernel set, 3 seeds each, all at once (one thread each).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export WORKBOOK_CACHE=/tmp/wbcache OMP_NUM_THREADS=1 MPLBACKEND=Agg
mkdir -p /tmp/logs
{ python3 -c "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"; grep -m1 'model name' /proc/cpuinfo; nproc; } > $OUT/machine.txt
python3 benchmarks/base_models.py --shipped --kernels default avx2 avx512 --jobs 6 > /tmp/logs/base.log 2>&1 &
for k in default avx2 avx512; do for s in 0 1 2; do
  ATEN_CPU_CAPABILITY=$k python3 benchmarks/reasoning.py --tasks addition multiplication --algos dapo --seeds $s --curve-n 1 \
    --no-progress --runs-dir /tmp/r-$k-$s > /tmp/logs/reason-$k-$s.log 2>&1 &
done; done
wait
for f in /tmp/logs/*.log; do echo "== $f"; cat $f; done > $OUT/all.log
for f in /tmp/logs/*.log; do tail -n 1 $f; done > $OUT/results.jsonl
cat $OUT/machine.txt; tail -c 3000 $OUT/all.log
