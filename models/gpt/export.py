#!/usr/bin/env python3
"""Scripts the byte-level GPT of models/gpt/gpt.py and saves it for `model.name: torchscript:...`.

  .venv/bin/python models/gpt/export.py --preset text --out data/gpt/gpt_text.pt
  .venv/bin/python models/gpt/export.py --preset bench --out data/gpt/gpt_bench.pt
  .venv/bin/python models/gpt/export.py --layers 2 --heads 2 --dim 64 --seq-len 32 --out tiny.pt

The sizes come from a preset in gpt.py (PRESETS), each flag overriding one of them; the YAML
schema has no place for them, so each config's top comment names its preset. The parameters are
initialized from torch.manual_seed(--seed) (default 0), so the same command writes the same
weights. It prints one line: the path, the sizes and the parameter count.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    gpt.add_size_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before init")
    parser.add_argument("--out", required=True, help="the torch.jit.save file to write")
    args = parser.parse_args()
    sizes = gpt.sizes_from_arguments(args)

    model = gpt.build(seed=args.seed, **sizes)
    scripted = torch.jit.script(model)
    directory = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(directory, exist_ok=True)
    tmp = args.out + ".tmp"
    torch.jit.save(scripted, tmp)
    os.replace(tmp, args.out)
    print("%s: %s, %d parameters" % (
        args.out, ", ".join("%s %d" % kv for kv in sizes.items()), gpt.parameter_count(model)))


if __name__ == "__main__":
    main()
