#!/usr/bin/env bash
# The runs device_async_sweep.sh had no time for: two lag-8 runs, the bfloat16 runs (default, avx2) and the mismatch
# statistics, all at once; finished runs are packed into runs.tgz every 15 s (what is there comes back if cut short).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export WORKBOOK_CACHE=/tmp/wbcache OMP_NUM_THREADS=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
R=/tmp/rest; mkdir -p $R
run() { local name=$1 k=$2; shift 2; ATEN_CPU_CAPABILITY=$k python3 -m workbook reason --impl solutions --run-name $name --runs-dir $R \
  --wandb disabled --no-progress --off-policy-delta 0 --kl-estimator k3 "$@" > $R/$name.log 2>&1 & }
run sweep-lag8-sequence_truncate-s2-avx512 avx512 --seeds 2 --lag 8 --correction sequence_truncate
run sweep-lag8-sequence_mask-s2-avx512 avx512 --seeds 2 --lag 8 --correction sequence_mask
for k in default avx2; do for s in 0 1 2; do for c in none sequence_truncate; do
  run bf16-lag0-$c-s$s-$k $k --seeds $s --lag 0 --sampler-dtype bfloat16 --correction $c
done; done; done
(for k in default avx2 avx512; do for s in 0 1 2; do ATEN_CPU_CAPABILITY=$k python3 -c "
import json,sys; sys.path.insert(0,'.'); from benchmarks.async_rl import measure_mismatch
m=measure_mismatch('solutions',$s); m.pop('diffs'); m.update(seed=$s,kernels='$k'); print(json.dumps(m))"; done; done > $OUT/mstats.jsonl 2>$OUT/mstats.err) &
while true; do sleep 15; (cd $R && tar czf $OUT/runs.tgz */summary.json */metrics.jsonl 2>/dev/null); ls $R/*/summary.json 2>/dev/null | wc -l; done
