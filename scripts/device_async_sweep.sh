#!/usr/bin/env bash
# Device check for docs/async_rl.md (issue 36): Part 10's staleness × correction lesson and the bfloat16 mismatch,
# over 3 seeds × the three CPU kernel sets, on another machine (another CPU, another torch), 16 runs at once.
# Every finished run's summary.json and metrics.jsonl come back in runs.tgz, also when the sweep runs out of time.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export WORKBOOK_CACHE=/tmp/wbcache OMP_NUM_THREADS=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
{ python3 -c "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"; grep -m1 'model name' /proc/cpuinfo; nproc; } > $OUT/machine.txt
cat $OUT/machine.txt
timeout ${SWEEP_TIMEOUT:-540} python3 benchmarks/async_rl.py --seeds 0 1 2 --parts sweep mismatch --lags 0 2 8 \
  --kernels default avx2 avx512 --jobs ${JOBS:-16} --runs-dir /tmp/sweep > $OUT/sweep.log 2>&1
echo "exit $?"
tail -n 1 $OUT/sweep.log > $OUT/sweep.json
cp /tmp/sweep/*.png $OUT/ 2>/dev/null
(cd /tmp/sweep && tar czf $OUT/runs.tgz */summary.json */metrics.jsonl 2>/dev/null)
grep -c "pass@1" $OUT/sweep.log; tail -c 3000 $OUT/sweep.log
