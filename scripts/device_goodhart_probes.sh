#!/usr/bin/env bash
# Device probe for docs/goodhart.md (issue 37, goal 2: does the RL peak move out with the proxy's data?):
# five designs × 3 seeds = 15 runs at once, one core each, the device CPU's own kernels. Each benchmark's JSON
# (the last line of its log) comes back. Variants: the defaults; a 100× data range (300/3,000/30,000 pairs on a bank
# of 6,000 samples); Bradley–Terry label noise 0.1; 3 epochs per proxy; the 100× range with label noise.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export WORKBOOK_CACHE=/tmp/wbcache OMP_NUM_THREADS=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
{ python3 -c "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"; grep -m1 'model name' /proc/cpuinfo; nproc; } > $OUT/machine.txt
cat $OUT/machine.txt
wide="--set proxy_pairs=300,3000,30000 --set bank_samples=6000"
declare -A V=([base]="" [wide]="$wide" [noise]="--set label_noise=0.1" [epochs]="--set proxy_epochs=3"
              [widenoise]="$wide --set label_noise=0.1")
for v in "${!V[@]}"; do
  timeout ${RUN_TIMEOUT:-540} python3 benchmarks/goodhart.py --seeds 0 1 2 --workers 3 --set ensemble=0 ${V[$v]} \
    --runs-dir /tmp/gp-$v > /tmp/gp-$v.log 2>&1 &
done
wait
for v in "${!V[@]}"; do tail -n 1 /tmp/gp-$v.log > $OUT/probe-$v.json; echo "== $v"; grep -h "goal\|whole benchmark\|error" /tmp/gp-$v.log; grep -h "accuracy\|RL against" /tmp/gp-$v/seed*.log | head -12; done
