#!/usr/bin/env bash
# Device check for docs/goodhart.md (issue 37): the Goodhart benchmark with its defaults over the three CPU kernel
# sets (ATEN_CPU_CAPABILITY=default|avx2|avx512), 3 seeds each, on another machine (another CPU, another torch):
# 3 benchmarks × 3 seeds = 9 runs at once, one core each. Each benchmark's JSON (last line of its log) comes back.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export WORKBOOK_CACHE=/tmp/wbcache OMP_NUM_THREADS=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
{ python3 -c "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"; grep -m1 'model name' /proc/cpuinfo; nproc; } > $OUT/machine.txt
cat $OUT/machine.txt
for k in default avx2 avx512; do
  ATEN_CPU_CAPABILITY=$k timeout ${RUN_TIMEOUT:-520} python3 benchmarks/goodhart.py --seeds 0 1 2 --workers 3 \
    --runs-dir /tmp/gh-$k > $OUT/goodhart-$k.log 2>&1 &
done
wait
for k in default avx2 avx512; do tail -n 1 $OUT/goodhart-$k.log > $OUT/goodhart-$k.json; grep -h "RL against\|accuracy" /tmp/gh-$k/seed*.log | head -3; done
(cd /tmp && tar czf $OUT/runs.tgz gh-*/seed*/seed*/rl/*/metrics.jsonl gh-*/seed*/results.json gh-*/*.png 2>/dev/null)
grep -h "goal\|whole benchmark" $OUT/goodhart-*.log
