#!/usr/bin/env python3
"""Turns the English text of Debian's `fortunes` package into a byte corpus for the GPT showcase.

  .venv/bin/python scripts/make_text_corpus.py --out data/gpt [--source /usr/share/games/fortunes]

Writes OUT/train.npy and OUT/val.npy: 1-D uint8 arrays (numpy.save), the bytes of the text, for
`data.format: tokens` with a byte vocabulary of 256; and OUT/val_short.npy, the first 32 KiB of
val.npy, for configs/gpt_bench.yaml, whose 25M-parameter model would spend minutes on all of val.

What goes in, deterministically (the same package gives the same bytes):
  * every regular file of SOURCE without an extension (the .dat files are fortune's indexes and
    the .u8 names are symbolic links to the plain files), in sorted order, except `ascii-art`
    (pictures, not prose);
  * each file is a list of fortunes separated by lines holding only '%'; a fortune keeps its own
    line breaks and tabs, and the fortunes are joined with one blank line in place of each '%';
  * terminal overstriking (x BACKSPACE x for bold, _ BACKSPACE x for underline) is reduced to the
    printed character, and BEL bytes are dropped, so no control byte but tab and newline is left.
The split is by fortune, so that both halves sample every file: fortune k (counted over all files
in order) goes to val when k % 20 == 19 (5%), to train otherwise.

It prints the sizes and the unigram baseline: the byte frequencies of train (add-one smoothed
over the 256 bytes), and their cross-entropy on val, in bits per byte and nats per byte. That is
the loss of a model that ignores context; the GPT's validation loss must fall well below it.
"""
import argparse
import math
import os
import sys

import numpy as np

SOURCE = "/usr/share/games/fortunes"
EXCLUDED = {"ascii-art"}
VAL_EVERY = 20
SHORT_VAL_BYTES = 32 * 1024
BELL = b"\x07"


def render_overstrike(line):
    """A line as a terminal prints it: BACKSPACE steps back, the next character overwrites, and
    a letter wins over the '_' that underlines it (both "____\b\b\b\bBODY" and "B\bBODY")."""
    if b"\x08" not in line:
        return line
    cells, col = [], 0
    for byte in line:
        if byte == 8:
            col = max(0, col - 1)
            continue
        if col == len(cells):
            cells.append(byte)
        elif cells[col] == ord("_") or byte != ord("_"):
            cells[col] = byte
        col += 1
    return bytes(cells)


def fortune_files(source):
    if not os.path.isdir(source):
        sys.exit("make_text_corpus.py: %s: no such directory; install the `fortunes` package "
                 "(scripts/install-deps.sh does)" % source)
    names = [n for n in sorted(os.listdir(source))
             if "." not in n and n not in EXCLUDED
             and os.path.isfile(os.path.join(source, n))
             and not os.path.islink(os.path.join(source, n))]
    if not names:
        sys.exit("make_text_corpus.py: %s holds no fortune files" % source)
    return [os.path.join(source, n) for n in names]


def fortunes_of(path):
    """The fortunes of one file, overstriking removed, each without its trailing newline."""
    with open(path, "rb") as f:
        text = f.read().replace(BELL, b"")
    out, lines = [], []
    for line in map(render_overstrike, text.split(b"\n")):
        if line == b"%":
            if lines:
                out.append(b"\n".join(lines).strip(b"\n"))
            lines = []
        else:
            lines.append(line)
    if any(lines):
        out.append(b"\n".join(lines).strip(b"\n"))
    return [f for f in out if f]


def unigram_baseline(train, val):
    """Cross-entropy of train's add-one-smoothed byte frequencies on val, in nats per byte."""
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    log_p = np.log(counts / counts.sum())
    return -float(np.mean(log_p[val]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for train.npy and val.npy")
    parser.add_argument("--source", default=SOURCE, help="fortune files (default %s)" % SOURCE)
    args = parser.parse_args()

    train_parts, val_parts, k = [], [], 0
    files = fortune_files(args.source)
    for path in files:
        for fortune in fortunes_of(path):
            (val_parts if k % VAL_EVERY == VAL_EVERY - 1 else train_parts).append(fortune)
            k += 1
    separator = b"\n\n"
    train = np.frombuffer(separator.join(train_parts) + b"\n", dtype=np.uint8)
    val = np.frombuffer(separator.join(val_parts) + b"\n", dtype=np.uint8)

    os.makedirs(args.out, exist_ok=True)
    for name, array in (("train.npy", train), ("val.npy", val),
                        ("val_short.npy", val[:SHORT_VAL_BYTES])):
        tmp = os.path.join(args.out, name + ".tmp.npy")
        np.save(tmp, array)
        os.replace(tmp, os.path.join(args.out, name))
    nats = unigram_baseline(train, val)
    print("%s: %d files, %d fortunes; train.npy %d bytes, val.npy %d bytes; unigram "
          "cross-entropy on val %.4f nats/byte = %.4f bits/byte" % (
              args.out, len(files), k, train.size, val.size, nats, nats / math.log(2)))


if __name__ == "__main__":
    main()
