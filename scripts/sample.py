#!/usr/bin/env python3
"""Prints text that a trained byte-level GPT (models/gpt/gpt.py) writes, to see what it learned.

  .venv/bin/python scripts/sample.py runs/gpt_text --prompt "The meaning of life is"
  .venv/bin/python scripts/sample.py runs/gpt_bench --preset bench --tokens 500
  .venv/bin/python scripts/sample.py --state-dict FILE.pt --temperature 0 --prompt "Q: "

It loads RUN_DIR/model_state_dict.pt (the parameters that cumulus-train writes at the end of a
run, a dict name -> tensor that torch.load reads; bench/ddp_train.py --save-state-dict writes
the same) into the module that export.py scripted, built from the same preset and size flags,
and extends the prompt one byte at a time: each byte is drawn from softmax(logits / temperature)
of the model's last position, the context being the last seq_len bytes. --temperature 0 takes
the most likely byte instead. The same --seed, state dict and torch build print the same text.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "gpt"))
import gpt  # noqa: E402


def load(path, sizes):
    try:
        state = torch.load(path, map_location="cpu")
    except (OSError, RuntimeError) as e:
        sys.exit("sample.py: %s: cannot load: %s" % (path, e))
    if not isinstance(state, dict):
        sys.exit("sample.py: %s: expected a dict name -> tensor, got %s" % (path, type(state)))
    model = gpt.Gpt(**sizes)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        sys.exit("sample.py: %s does not fit a GPT with %s; pass the --preset (or size flags) "
                 "that exported the model:\n%s" % (
                     path, ", ".join("%s %d" % kv for kv in sizes.items()), e))
    return model.eval()


@torch.no_grad()
def generate(model, prompt, count, temperature, generator):
    tokens = torch.tensor([list(prompt)], dtype=torch.long)
    for _ in range(count):
        logits = model(tokens[:, -model.seq_len:])[0, -1]
        if temperature <= 0:
            following = logits.argmax().view(1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            following = torch.multinomial(probs, 1, generator=generator)
        tokens = torch.cat([tokens, following.view(1, 1)], dim=1)
    return bytes(tokens[0].tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", nargs="?", help="a run directory with model_state_dict.pt")
    parser.add_argument("--state-dict", help="the state dict file (instead of RUN_DIR)")
    gpt.add_size_arguments(parser)
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument("--tokens", type=int, default=400, help="bytes to generate (400)")
    parser.add_argument("--temperature", type=float, default=0.8,
                        help="softmax temperature (0.8); 0: always the most likely byte")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sampling (0)")
    args = parser.parse_args()
    if (args.run_dir is None) == (args.state_dict is None):
        parser.error("name a run directory or --state-dict FILE (one of them)")
    path = args.state_dict or os.path.join(args.run_dir, "model_state_dict.pt")
    if not os.path.exists(path):
        sys.exit("sample.py: %s: no such file; has the run finished?" % path)
    prompt = args.prompt.encode("utf-8")
    if not prompt:
        parser.error("--prompt must not be empty")
    if args.tokens < 0:
        parser.error("--tokens must be >= 0")

    model = load(path, gpt.sizes_from_arguments(args))
    text = generate(model, prompt, args.tokens, args.temperature,
                    torch.Generator().manual_seed(args.seed))
    sys.stdout.write(text.decode("utf-8", errors="replace") + "\n")


if __name__ == "__main__":
    main()
