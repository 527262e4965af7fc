#!/bin/bash
# The mlp alone (p=1, plain cumulus-train) and in a group of two under cumulus-run, 1000 steps,
# each tree alternately, three times: per run the mean step time of steps 101..1000 and the
# median "optimizer" span of the trace.
set -u
O=/tmp/te/mlp; mkdir -p $O
for i in 1 2 3; do
  for side in before after; do
    T=/work/main; [ $side = before ] && T=/work/before
    for p in 1 2; do
      d=$O/$side-p$p-$i; rm -rf $d
      if [ $p = 1 ]; then launch=($T/build/bin/cumulus-train)
      else launch=($T/build/bin/cumulus-run --nproc-per-node 2 --max-restarts 0 --log-dir $d/logs -- $T/build/bin/cumulus-train); fi
      (cd $T && "${launch[@]}" configs/fashion_mnist.yaml --set trainer.max_steps=1000 \
        --set trainer.log_every_steps=100 --set trainer.run_dir=$d --trace "$d/trace.{rank}.json" > $d.log 2>&1)
      /usr/bin/python3 - $d $side $p <<'PY'
import json,sys,statistics
d,side,p=sys.argv[1:]
t=[json.loads(l) for l in open(d+'/metrics.jsonl')]
tr=[r for r in t if r['type']=='train' and r['step']>100]
ms=sum(r['step_time_ms'] for r in tr)/len(tr)
ev=json.load(open(d+'/trace.0.json'))['traceEvents']
opt=[e['dur']/1000 for e in ev if e.get('name')=='optimizer'][100:]
print(side, 'p=%s'%p, 'step ms %.3f'%ms, 'optimizer ms %.4f'%statistics.median(opt))
PY
    done
  done
done
