#!/usr/bin/env bash
# Device check for docs/reasoning.md: every --algo on both tasks from the shipped base models, 3 seeds,
# one process per (algorithm, task), one torch thread each, on the device's 16 CPU cores.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export WORKBOOK_CACHE=/tmp/wbcache OMP_NUM_THREADS=1 MPLBACKEND=Agg
mkdir -p /tmp/logs
for a in grpo dapo dr_grpo gspo cispo rloo ppo; do for t in addition multiplication; do
  timeout 450 python3 benchmarks/reasoning.py --tasks $t --algos $a --seeds 0 1 2 --curve-n 1 --runs-dir /tmp/r-$a-$t > /tmp/logs/$a-$t.log 2>&1 &
done; done
wait
grep -h -E "^(addition|multiplication) " /tmp/logs/*.log > $OUT/runs.txt
for f in /tmp/logs/*.log; do tail -n 1 $f; done > $OUT/results.jsonl
cat $OUT/runs.txt
