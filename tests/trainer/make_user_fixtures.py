#!/usr/bin/env python3
"""Writes the users' models and data that tests/trainer/user_models_test.cc trains: TorchScript
modules made with torch.jit.script, and .npy files made with numpy.save, as a user would.

Run with the project environment's Python (it has torch and numpy):
    .venv/bin/python tests/trainer/make_user_fixtures.py OUT_DIR
Everything is seeded, so two runs write the same bytes. Writes into OUT_DIR:
  linear.pt         Linear 13 -> 1, forward(x) -> [B, 1]                 (loss mse)
  linear_loss.pt    the same, with the same initial parameters, whose forward(x, y) returns
                    its mean squared error                                 (loss module)
  vector_loss.pt    forward(x, y) -> each sample's error, [B]: not a scalar
  wrong_width.pt    Linear 12 -> 1: fails on 13 features
  fails_on_batches.pt  Linear 13 -> 1 whose forward raises on a batch of more than one sample:
                    it passes the one-sample check before training, then fails at the first step
  tiny_lm.pt        Embedding 256 x 32 -> Linear 32 -> 256, forward(x [B, T]) -> [B, T, 256]
  small_vocab.pt    the same with 200 token ids
  narrow_lm.pt      Embedding 256 -> Linear 32 -> 200: embeds every byte, scores 200 ids
  hangs_in_training.pt  linear.pt whose forward loops forever in training mode (the start-up
                    dry run, in evaluation mode, passes)
  hangs_on_marked.pt  linear.pt whose forward loops forever in training mode on a batch with a
                    marked sample (last feature above 100): in a group, only the rank that
                    draws it hangs, while the others wait for it
  no_parameters.pt  forward(x) -> x[:, :1] * 2: nothing to train
  float32_only.pt   linear.pt plus a float32 offset added with index_add, which takes no
                    bfloat16 input beside a float32 one: runs in fp32, fails under bf16 autocast
  state_dict.pt     torch.save of linear's state_dict: not a TorchScript module
  state_dict_legacy.pt  the same in torch.save's legacy (pickle) format
  regression/{train,test}/{inputs,targets}.npy   float32 [N, 13] and [N, 1]
  empty/{inputs,targets}.npy                     float32 [0, 13] and [0, 1]
  flat_targets/{inputs,targets}.npy              targets [N]: do not match [N, 1] outputs
  bad_rows/{inputs,targets}.npy                  10 inputs, 9 targets
  marked/{inputs,targets}.npy                    regression/train with sample 100's last feature
                                                 set to 1000 (hangs_on_marked.pt's mark)
  text_train.npy, text_val.npy                   uint8 bytes of English sentences
  wide.npy          uint8 text with byte 250 after the first window
  short.npy         10 tokens
"""
import os
import sys

import numpy
import torch


class Linear(torch.nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.fc = torch.nn.Linear(features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class LinearLoss(torch.nn.Module):
    """Computes its own loss: forward(inputs, targets) -> the mean over the batch."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((self.fc(x) - y) ** 2).mean()


class VectorLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((self.fc(x) - y) ** 2).mean(1)


class FailsOnBatches(torch.nn.Module):
    """A model with a bug of its own that only training meets."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(0) > 1:
            raise RuntimeError("this model fails on a batch of more than one sample")
        return self.fc(x)


class HangsInTraining(torch.nn.Module):
    """A model whose forward never returns once training starts."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        turns = 0
        while self.training and turns >= 0:
            turns = turns + 1
        return self.fc(x)


class HangsOnMarked(torch.nn.Module):
    """A model whose forward never returns on one particular sample, once training starts."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        turns = 0
        while self.training and bool((x[:, 12] > 100.0).any()) and turns >= 0:
            turns = turns + 1
        return self.fc(x)


class Float32Only(torch.nn.Module):
    """A model that runs in float32 and fails under bf16 autocast: its linear layer's output is
    bfloat16 there, and index_add wants the float32 offset in the same dtype."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 1)
        self.offset = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return y.index_add(1, torch.zeros(1, dtype=torch.long), self.offset.expand(y.size(0), 1))


class NoParameters(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * 2.0


class TinyLm(torch.nn.Module):
    """A bigram language model: each token's embedding scores the next token."""

    def __init__(self, vocab: int, outputs: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 32)
        self.head = torch.nn.Linear(32, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


def save_module(make, out, name):
    torch.manual_seed(0)  # every module starts from the same draws: linear and linear_loss agree
    torch.jit.script(make()).save(os.path.join(out, name))


def save_samples(directory, inputs, targets):
    os.makedirs(directory, exist_ok=True)
    numpy.save(os.path.join(directory, "inputs.npy"), inputs)
    numpy.save(os.path.join(directory, "targets.npy"), targets)


def regression(generator, n, weights):
    x = generator.standard_normal((n, 13)).astype(numpy.float32)
    noise = 0.01 * generator.standard_normal((n, 1))
    return x, (x @ weights + 0.5 + noise).astype(numpy.float32)


def text(generator, sentences):
    words = ["the cat sat on the mat.", "a dog ran in the park.", "we like to read books.",
             "it is warm in the sun.", "they sing a song at night."]
    picks = generator.integers(0, len(words), sentences)
    return numpy.frombuffer(" ".join(words[i] for i in picks).encode(), dtype=numpy.uint8)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    save_module(lambda: Linear(13), out, "linear.pt")
    save_module(LinearLoss, out, "linear_loss.pt")
    save_module(VectorLoss, out, "vector_loss.pt")
    save_module(lambda: Linear(12), out, "wrong_width.pt")
    save_module(FailsOnBatches, out, "fails_on_batches.pt")
    save_module(lambda: TinyLm(256, 256), out, "tiny_lm.pt")
    save_module(lambda: TinyLm(200, 200), out, "small_vocab.pt")
    save_module(lambda: TinyLm(256, 200), out, "narrow_lm.pt")
    save_module(HangsInTraining, out, "hangs_in_training.pt")
    save_module(HangsOnMarked, out, "hangs_on_marked.pt")
    save_module(NoParameters, out, "no_parameters.pt")
    save_module(Float32Only, out, "float32_only.pt")
    torch.manual_seed(0)
    torch.save(Linear(13).state_dict(), os.path.join(out, "state_dict.pt"))
    torch.save(Linear(13).state_dict(), os.path.join(out, "state_dict_legacy.pt"),
               _use_new_zipfile_serialization=False)

    generator = numpy.random.default_rng(7)
    weights = generator.standard_normal((13, 1))
    train_x, train_y = regression(generator, 512, weights)
    save_samples(os.path.join(out, "regression", "train"), train_x, train_y)
    save_samples(os.path.join(out, "regression", "test"), *regression(generator, 128, weights))
    x, y = regression(generator, 64, weights)
    save_samples(os.path.join(out, "flat_targets"), x, y.ravel())
    save_samples(os.path.join(out, "bad_rows"), x[:10], y[:9])
    save_samples(os.path.join(out, "empty"), x[:0], y[:0])

    numpy.save(os.path.join(out, "text_train.npy"), text(generator, 400))
    numpy.save(os.path.join(out, "text_val.npy"), text(generator, 80))
    wide = text(generator, 60).copy()
    wide[100] = 250
    numpy.save(os.path.join(out, "wide.npy"), wide)
    numpy.save(os.path.join(out, "short.npy"), text(generator, 1)[:10])
    marked = train_x.copy()
    marked[100, 12] = 1000.0
    save_samples(os.path.join(out, "marked"), marked, train_y)


if __name__ == "__main__":
    main()
