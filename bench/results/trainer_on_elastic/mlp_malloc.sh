#!/bin/bash
# The mlp alone, 1000 steps, each tree alternately, three times, with glibc's malloc as it comes
# and with its mmap threshold fixed (MALLOC_MMAP_THRESHOLD_=131072: every large buffer from mmap,
# whatever was allocated and freed before): the mean step of steps 101..1000 and the median
# "optimizer" span.
set -u
O=/tmp/te/malloc; mkdir -p $O
for i in 1 2 3; do
  for env in default fixed; do
    for side in before after; do
      T=/work/main; [ $side = before ] && T=/work/before
      d=$O/$side-$env-$i; rm -rf $d
      e=(); [ $env = fixed ] && e=(MALLOC_MMAP_THRESHOLD_=131072)
      (cd $T && env "${e[@]}" $T/build/bin/cumulus-train configs/fashion_mnist.yaml --set trainer.max_steps=1000 \
        --set trainer.log_every_steps=100 --set trainer.run_dir=$d --trace "$d/trace.json" > $d.log 2>&1)
      /usr/bin/python3 - $d $side $env <<'PY'
import json,sys,statistics
d,side,env=sys.argv[1:]
t=[json.loads(l) for l in open(d+'/metrics.jsonl')]
tr=[r for r in t if r['type']=='train' and r['step']>100]
ms=sum(r['step_time_ms'] for r in tr)/len(tr)
ev=json.load(open(d+'/trace.json'))['traceEvents']
opt=[e['dur']/1000 for e in ev if e.get('name')=='optimizer'][100:]
print(side, env, 'step ms %.3f'%ms, 'optimizer ms %.4f'%statistics.median(opt))
PY
    done
  done
done
