"""A small decoder-only transformer over bytes, in plain PyTorch that torch.jit.script accepts.

The Cumulus GPT showcase (configs/gpt_text.yaml, configs/gpt_bench.yaml) trains this module after
models/gpt/export.py has scripted and saved it; scripts/sample.py loads the trained
model_state_dict.pt back into it. Attention is written out rather than calling
F.scaled_dot_product_attention: the model was first written for torch 1.13, which lacked it, and
keeping it so keeps the exported file and the measured figures comparable across versions.

  forward(idx: int64 [B, T], T <= seq_len) -> logits float32 [B, T, vocab]

Layout (the state_dict names, as Python's model.state_dict() gives them):
  tok_emb.weight [vocab, dim]             token embedding
  pos_emb.weight [seq_len, dim]           learned position embedding
  blocks.<i>.ln1.{weight,bias}            pre-norm before attention
  blocks.<i>.attn.qkv.{weight,bias}       [3*dim, dim]: queries, keys, values of all heads
  blocks.<i>.attn.proj.{weight,bias}      [dim, dim]
  blocks.<i>.ln2.{weight,bias}            pre-norm before the MLP
  blocks.<i>.mlp.fc.{weight,bias}         [4*dim, dim], then GELU
  blocks.<i>.mlp.proj.{weight,bias}       [dim, 4*dim]
  ln_f.{weight,bias}                      final LayerNorm
  head.weight [vocab, dim]                the output projection, not tied to tok_emb: a tied
                                          weight would be one parameter under two names, which
                                          the C++ side's named parameters and a plain
                                          name -> tensor state_dict do not both keep.
There are no buffers: the causal mask is built in forward (T x T booleans, negligible beside the
attention itself), so the state_dict holds parameters only. No dropout: a run is deterministic.

Initialization (GPT-2's): every Linear and Embedding weight ~ N(0, 0.02), biases 0, LayerNorms
1 and 0, and the two residual projections of each block (attn.proj, mlp.proj) ~ N(0, 0.02 /
sqrt(2 * layers)). Call torch.manual_seed(seed) before constructing for a reproducible model.
"""
import math
from typing import Dict

import torch
from torch import nn

VOCAB = 256  # bytes: no tokenizer to ship

# Named sizes, so that export.py and sample.py build the same module from one word. Each
# config's top comment shows the export command with its preset.
PRESETS: Dict[str, Dict[str, int]] = {
    # configs/gpt_text.yaml: trains in minutes on 2 cores.
    "text": {"layers": 4, "heads": 4, "dim": 128, "seq_len": 128},
    # configs/gpt_bench.yaml: ~25M parameters, where gradient synchronization matters.
    "bench": {"layers": 8, "heads": 8, "dim": 512, "seq_len": 128},
}


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads != 0:
            raise ValueError("dim %d is not a multiple of heads %d" % (dim, heads))
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        # [B, T, 3, H, D] -> [3, B, H, T, D]: one matmul for all heads' q, k and v.
        qkv = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        y = torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, T, D]
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Mlp(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.nn.functional.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, layers: int, heads: int, dim: int, seq_len: int, vocab: int = VOCAB):
        super().__init__()
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self._init(layers)

    def _init(self, layers: int) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        residual_std = 0.02 / math.sqrt(2 * layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=residual_std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        if t > self.seq_len:
            raise ValueError("sequence length " + str(t) + " exceeds the model's seq_len " +
                             str(self.seq_len))
        positions = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(layers: int, heads: int, dim: int, seq_len: int, seed: int = 0) -> Gpt:
    """The module, initialized from torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    return Gpt(layers, heads, dim, seq_len)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def add_size_arguments(parser) -> None:
    """--preset and the flags that override its sizes, for export.py and sample.py alike."""
    parser.add_argument("--preset", default="text", choices=sorted(PRESETS),
                        help="named sizes (default text): " + "; ".join(
                            "%s: %s" % (name, ", ".join("%s %d" % kv for kv in sizes.items()))
                            for name, sizes in sorted(PRESETS.items())))
    for key in ("layers", "heads", "dim", "seq_len"):
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None,
                            help="override the preset's %s" % key)


def sizes_from_arguments(args) -> Dict[str, int]:
    sizes = dict(PRESETS[args.preset])
    for key in sizes:
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                raise SystemExit("--%s must be at least 1, got %d" % (key.replace("_", "-"), value))
            sizes[key] = value
    return sizes
