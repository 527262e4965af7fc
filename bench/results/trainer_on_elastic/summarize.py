"""Medians over rounds of Cumulus/DDP throughput (samples per second) for each experiment and
world size, before and after; and whether the test losses are the same on both sides."""
import glob, json, statistics, sys, collections

d = sys.argv[1] if len(sys.argv) > 1 else '.'
ratios = collections.defaultdict(list)
losses = collections.defaultdict(set)
for path in sorted(glob.glob(f'{d}/ddp_*_*.jsonl')):
    side = path.split('ddp_')[1].split('_')[0]
    rows = [json.loads(l) for l in open(path) if l.strip()]
    rows = [r for r in rows if r.get('type') == 'summary']
    by = {}
    for r in rows:
        by[(r['experiment'], r['world_size'], r['impl'])] = r
    for (exp, w, impl), r in by.items():
        if impl != 'cumulus':
            continue
        ddp = by.get((exp, w, 'ddp'))
        if ddp:
            ratios[(side, exp, w)].append(r['samples_per_sec'] / ddp['samples_per_sec'])
        losses[(exp, w)].add((side, round(r['test_loss'], 9)))
for exp in ('mlp', 'convnet', 'gpt'):
    for w in (1, 2):
        cells = []
        for side in ('before', 'after'):
            v = ratios.get((side, exp, w), [])
            cells.append(f"{side} {statistics.median(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})"
                         if v else f'{side} -')
        same = len({l for s, l in losses[(exp, w)]}) == 1
        print(f'{exp} p={w}: ' + '; '.join(cells) + f'; test loss same: {same}')
