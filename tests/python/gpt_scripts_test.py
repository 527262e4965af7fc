#!/usr/bin/env python3
"""The GPT showcase's Python side: models/gpt (gpt.py, export.py), scripts/make_text_corpus.py,
scripts/sample.py and bench/ddp_train.py's token windows, each run the way a user runs it.

  .venv/bin/python -m unittest -v tests/python/gpt_scripts_test.py   (from the checkout)
ctest runs it as python_test.GptScripts (tests/CMakeLists.txt).
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = sys.executable
sys.path.insert(0, os.path.join(ROOT, "models", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpt  # noqa: E402
import ddp_train  # noqa: E402

TINY = ["--layers", "2", "--heads", "2", "--dim", "32", "--seq-len", "16"]
TINY_SIZES = {"layers": 2, "heads": 2, "dim": 32, "seq_len": 16}


def run(*args):
    done = subprocess.run([PYTHON] + list(args), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s" % (args, done.returncode, done.stderr))
    return done.stdout


class GptScripts(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cumulus-gpt-")
        self.addCleanup(shutil.rmtree, self.dir)

    def test_export_writes_a_scripted_model_with_the_python_names(self):
        path = os.path.join(self.dir, "tiny.pt")
        out = run("models/gpt/export.py", *TINY, "--out", path)
        eager = gpt.build(**TINY_SIZES)
        count = sum(p.numel() for p in eager.parameters())
        # 2 x (qkv 32*96+96, proj 32*32+32, fc 32*128+128, proj 128*32+32, 2 LayerNorms 4*32)
        # + tok_emb 256*32 + pos_emb 16*32 + ln_f 2*32 + head 256*32
        self.assertEqual(count, 2 * (3168 + 1056 + 4224 + 4128 + 128) + 8192 + 512 + 64 + 8192)
        self.assertEqual(out.strip(), "%s: layers 2, heads 2, dim 32, seq_len 16, %d parameters"
                         % (path, count))
        scripted = torch.jit.load(path)
        self.assertEqual([n for n, _ in scripted.named_parameters()],
                         list(eager.state_dict().keys()))
        self.assertEqual(list(scripted.named_buffers()), [])
        idx = torch.arange(2 * 16).remainder(256).view(2, 16)
        logits = scripted(idx)
        self.assertEqual(tuple(logits.shape), (2, 16, 256))
        # Same seed, same weights, same operations; the executors may order float sums apart.
        self.assertTrue(torch.allclose(logits, eager(idx), rtol=1e-5, atol=1e-6))

    def test_attention_is_causal(self):
        model = gpt.build(**TINY_SIZES)
        a = torch.tensor([[1, 2, 3, 4, 5, 6]])
        b = torch.tensor([[1, 2, 3, 9, 9, 9]])
        with torch.no_grad():
            self.assertTrue(torch.allclose(model(a)[:, :3], model(b)[:, :3]))
            self.assertFalse(torch.allclose(model(a)[:, 3:], model(b)[:, 3:]))

    def test_a_sequence_longer_than_seq_len_is_refused(self):
        with self.assertRaisesRegex(ValueError, "sequence length 17 exceeds the model's seq_len 16"):
            gpt.build(**TINY_SIZES)(torch.zeros(1, 17, dtype=torch.long))

    def test_corpus_splits_fortunes_and_renders_overstriking(self):
        source = os.path.join(self.dir, "fortunes")
        os.makedirs(source)
        fortunes = [b"fortune %d\n\tline two" % k for k in range(40)]
        fortunes[3] = b"a ___\x08\x08\x08BIG\x07 deal"
        with open(os.path.join(source, "a"), "wb") as f:
            f.write(b"\n%\n".join(fortunes[:25]) + b"\n%\n")
        with open(os.path.join(source, "b"), "wb") as f:
            f.write(b"\n%\n".join(fortunes[25:]) + b"\n")
        for ignored in ("a.dat", "ascii-art"):
            with open(os.path.join(source, ignored), "wb") as f:
                f.write(b"ignored\n")
        os.symlink("a", os.path.join(source, "a.u8"))
        out = os.path.join(self.dir, "out")
        printed = run("scripts/make_text_corpus.py", "--source", source, "--out", out)

        fortunes[3] = b"a BIG deal"
        expect_val = [fortunes[19], fortunes[39]]
        expect_train = [f for k, f in enumerate(fortunes) if k % 20 != 19]
        train = np.load(os.path.join(out, "train.npy"))
        val = np.load(os.path.join(out, "val.npy"))
        self.assertEqual(train.dtype, np.uint8)
        self.assertEqual(bytes(train), b"\n\n".join(expect_train) + b"\n")
        self.assertEqual(bytes(val), b"\n\n".join(expect_val) + b"\n")
        self.assertEqual(bytes(np.load(os.path.join(out, "val_short.npy"))), bytes(val))
        counts = np.bincount(train, minlength=256) + 1.0
        nats = -np.mean(np.log(counts / counts.sum())[val])
        self.assertIn("2 files, 40 fortunes; train.npy %d bytes, val.npy %d bytes; unigram "
                      "cross-entropy on val %.4f nats/byte = %.4f bits/byte"
                      % (train.size, val.size, nats, nats / math.log(2)), printed)

    def test_sample_continues_the_prompt_from_a_state_dict(self):
        path = os.path.join(self.dir, "model_state_dict.pt")
        torch.save(dict(gpt.build(**TINY_SIZES).state_dict()), path)
        args = ["scripts/sample.py", "--state-dict", path, *TINY, "--prompt", "Hi",
                "--tokens", "20", "--seed", "3"]
        first = run(*args)
        self.assertTrue(first.startswith("Hi"))
        self.assertEqual(run(*args), first)  # same seed, same text
        greedy = run(*args[:-2], "--temperature", "0")
        self.assertTrue(greedy.startswith("Hi"))

    def test_sample_names_the_mismatch_of_a_wrong_preset(self):
        path = os.path.join(self.dir, "model_state_dict.pt")
        torch.save(dict(gpt.build(**TINY_SIZES).state_dict()), path)
        done = subprocess.run([PYTHON, "scripts/sample.py", "--state-dict", path], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 1)
        self.assertIn("%s does not fit a GPT with layers 4, heads 4, dim 128, seq_len 128; pass "
                      "the --preset (or size flags) that exported the model" % path, done.stderr)

    def test_ddp_token_windows_follow_the_cumulus_rule(self):
        path = os.path.join(self.dir, "tokens.npy")
        np.save(path, np.arange(23, dtype=np.uint16))
        windows = ddp_train.TokenWindows(path, 5)
        self.assertEqual(len(windows), 4)  # (23 - 1) // 5
        inputs, targets = windows.batch(torch.tensor([3, 0]))
        self.assertEqual(inputs.tolist(), [[15, 16, 17, 18, 19], [0, 1, 2, 3, 4]])
        self.assertEqual(targets.tolist(), [[16, 17, 18, 19, 20], [1, 2, 3, 4, 5]])
        self.assertEqual(inputs.dtype, torch.int64)


if __name__ == "__main__":
    unittest.main()
