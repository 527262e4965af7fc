#!/usr/bin/env bash
# Makes what the GPT experiments (configs/gpt_text.yaml, configs/gpt_bench.yaml) read, into OUTDIR
# (default data/gpt, which git ignores):
#   train.npy, val.npy   the fortunes corpus as bytes (scripts/make_text_corpus.py), and
#   val_short.npy        the first 32 KiB of val.npy
#   gpt_text.pt          the scripted model of preset "text"  (models/gpt/export.py)
#   gpt_bench.pt         the scripted model of preset "bench"
# Each file is rebuilt only when it is missing or older than the script that writes it (or
# models/gpt/gpt.py), so `make run CONFIG=configs/gpt_text.yaml` runs this every time for free.
# Needs the project environment's torch and numpy (scripts/python-env.sh) and the fortunes package
# (scripts/install-deps.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/data/gpt}"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment, with torch

stale() {  # target dependency...: true when target is missing or older than one of them
  local target=$1; shift
  [[ -e $target ]] || return 0
  for dep in "$@"; do [[ $dep -nt $target ]] && return 0; done
  return 1
}

mkdir -p "$out"
corpus="$root/scripts/make_text_corpus.py"
if stale "$out/train.npy" "$corpus" || stale "$out/val.npy" "$corpus" ||
   stale "$out/val_short.npy" "$corpus"; then
  "$python" "$corpus" --out "$out"
fi
for preset in text bench; do
  if stale "$out/gpt_$preset.pt" "$root/models/gpt/export.py" "$root/models/gpt/gpt.py"; then
    "$python" "$root/models/gpt/export.py" --preset "$preset" --out "$out/gpt_$preset.pt"
  fi
done
