#!/bin/bash
# convnet world 1, 60 steps, each tree's cumulus-train, alternately; per run: mean step ms of
# steps 11..60 and the median of each trace span.
set -u
for i in 1 2 3; do
  for side in before after; do
    T=/work/main; [ $side = before ] && T=/work/before
    d=/tmp/ba/ab-$side-$i; rm -rf $d
    (cd $T && build/bin/cumulus-train configs/fashion_mnist_convnet.yaml --set trainer.max_steps=60 \
      --set trainer.log_every_steps=10 --set trainer.run_dir=$d --trace $d/trace.json > $d.log 2>&1)
    /usr/bin/python3 - $d <<'PY'
import json,sys,statistics,collections
d=sys.argv[1]
t=[json.loads(l) for l in open(d+'/metrics.jsonl')]
tr=[r for r in t if r['type']=='train' and r['step']>10]
ms=sum(r['step_time_ms'] for r in tr)/len(tr)
ev=json.load(open(d+'/trace.json'))['traceEvents']
spans=collections.defaultdict(list)
for e in ev:
    if 'dur' in e: spans[e['name']].append(e['dur']/1000)
print(d.split('/')[-1], 'step ms %.1f'%ms, ' '.join('%s %.2f'%(k,statistics.median(v[10:] or v)) for k,v in sorted(spans.items())))
PY
  done
done
