#!/usr/bin/env python3
"""PyTorch DDP (Gloo) twin of cumulus-train, for bench/compare_ddp.sh.

It trains what a Cumulus experiment YAML describes, doing what cumulus-train does, step for
step:
  * data, data.format idx (the default): Fashion-MNIST / MNIST from the same IDX .gz files,
    scaled to [0, 1], then normalized by the train set's mean and (population) std over all
    pixels (data/dataset.cc);
  * data, data.format tokens: data.train / data.test, 1-D .npy token streams (numpy.load);
    sample i is the window of tokens [iT, iT + T + 1) (T = data.seq_len): inputs its first T,
    targets its last T, so there are (tokens - 1) // T samples, as in data/npy.h;
  * model: models/fixtures/reference_models.py's Mlp / ConvNet (the Python copies of
    models/builtin.cc, same parameter names and shapes), built after torch.manual_seed(seed),
    or for `torchscript:FILE` the file itself (torch.jit.load), every rank the same weights;
  * sampler: each epoch a permutation of the train samples drawn from (seed, epoch); global
    batch k is positions [kB, (k+1)B); rank r of p takes the contiguous slice [rB/p, (r+1)B/p);
    the last short batch is dropped (drop_last) unless data.drop_last is false. The order
    differs from Cumulus's SplitMix64 shuffle; the distribution does not;
  * batches: index_select on the preloaded tensors, as data::gather does (no DataLoader, whose
    worker processes would compete for the same cores);
  * loss: cross entropy (loss.name cross_entropy), mean over the local batch, of logits [B, C]
    against class ids or of logits [B, T, V] against token ids (mean over the B x T tokens);
    DDP averages gradients over ranks, so each rank holds the gradient of the global-batch
    mean, as in Cumulus;
  * clipping: trainer.grad_clip_norm > 0 clips the global gradient norm after the all-reduce
    (torch.nn.utils.clip_grad_norm_: scale max_norm / (norm + 1e-6) when below 1, as
    trainer/optimizer.cc clipGradNorm);
  * optimizer: torch.optim.SGD (momentum, nesterov, coupled weight decay) or torch.optim.AdamW,
    both of which match trainer/optimizer.cc's update rules, with PyTorch's default
    implementation choice;
  * schedule: trainer/schedule.cc's linear warm-up then constant / step / cosine, set per step;
  * threads: torch.set_num_threads(trainer.threads if > 0 else usable CPUs // LOCAL_WORLD_SIZE),
    the rule of trainer/run_env.cc intraOpThreads();
  * precision: trainer.precision bf16 runs the forward under torch.autocast("cpu",
    dtype=torch.bfloat16) and the loss in float32 on the outputs cast back, as cumulus-train does
    (auto: bf16 where /proc/cpuinfo lists avx512_bf16 or amx_bf16); evaluation likewise;
  * gradient sync: torch.nn.parallel.DistributedDataParallel over the Gloo backend, default
    25 MiB buckets (Cumulus's comm.bucket_cap_mb default as well); --backend cumulus runs the
    same script over Cumulus's torch.distributed backend (bench/compare_python.sh).

Timing: rank 0 times every optimizer step (gather, forward, backward with DDP's all-reduce,
optimizer step) and reports global samples/s = (timed steps x global batch) / (their summed
time), skipping the first --skip-steps steps (warm-up: allocator, Gloo connections); the
evaluation is outside the timed steps. Cumulus's train records measure the same span.

Evaluation, as trainer/evaluator.cc: every eval.every_steps steps (0: at each epoch's end) and
after the last step, each rank evaluates its contiguous share of the test samples in batches of
eval.batch_size and the sums are all-reduced: test_loss is the mean cross entropy per target
(per image, or per token), test_accuracy the fraction of targets whose argmax is right. The
summary's test_loss is the one after the last step.

Also reported: optimizer_step_ms, the median time of optimizer.step() on rank 0 over the timed
steps, and peak_rss_mb, the largest ru_maxrss (getrusage RUSAGE_SELF) over the ranks at the end.

Usage:
  .venv/bin/python bench/ddp_train.py CONFIG.yaml [--set KEY=VALUE]... [--nproc N]
With --nproc N (and no RANK in the environment) it is its own launcher: it starts N ranks as
background processes with the env:// variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE) on loopback and waits for them, so that it needs no torchrun.
Started with those variables already set, it is one rank. Rank 0 prints one
JSON line (type "summary", impl "ddp") on stdout; everything else goes to stderr.

CONFIG may be the experiment file itself or, better, the output of
`cumulus-config check FILE --set ...` (every key resolved, so no default here can drift).
"""
import argparse
import gzip
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models", "fixtures"))

# Defaults of the keys read here, from configs/experiment.h, for an unresolved experiment file.
DEFAULTS = {
    "model": {"name": "mlp", "hidden": [256, 128, 100], "dropout": 0.0},
    "data": {"format": "idx", "dataset": "fashion-mnist",
             "dir": "/usr/share/datasets/fashion-mnist", "normalize": True, "shuffle": True,
             "drop_last": True, "train": "", "test": "", "seq_len": 128},
    "loss": {"name": "cross_entropy"},
    "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": False,
                  "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
    "schedule": {"name": "constant", "warmup_steps": 0, "step_size": 1000, "gamma": 0.1,
                 "min_lr": 0.0},
    "trainer": {"global_batch_size": 128, "epochs": 3, "max_steps": 0, "seed": 0,
                "grad_clip_norm": 0.0, "grad_accumulation": 1, "threads": 0,
                "precision": "fp32"},
    "eval": {"batch_size": 1000, "every_steps": 0},
    "comm": {"bucket_cap_mb": 25.0},
}
NUM_CLASSES = 10


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def load_config(path, overrides):
    """The experiment as nested dicts, defaults filled in, `section.key=value` overrides applied."""
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    config = {section: dict(keys) for section, keys in DEFAULTS.items()}
    for section, keys in raw.items():
        if isinstance(keys, dict):
            config.setdefault(section, {}).update(keys)
    for item in overrides:
        key, sep, value = item.partition("=")
        parts = key.split(".")
        if not sep or len(parts) != 2:
            sys.exit("ddp_train.py: --set %r: expected SECTION.KEY=VALUE" % item)
        config.setdefault(parts[0], {})[parts[1]] = yaml.safe_load(value)
    # PyYAML reads "1e-8" (no dot) as a string; the defaults' types say what each key is.
    for section, keys in DEFAULTS.items():
        for key, default in keys.items():
            if isinstance(default, float):
                config[section][key] = float(config[section][key])
    if config["trainer"]["grad_accumulation"] != 1:
        sys.exit("ddp_train.py: %s: grad_accumulation > 1 is not mirrored" % path)
    if config["trainer"]["precision"] not in ("fp32", "bf16", "auto"):
        sys.exit("ddp_train.py: trainer.precision %r: expected fp32, bf16 or auto"
                 % config["trainer"]["precision"])
    if config["loss"]["name"] != "cross_entropy":
        sys.exit("ddp_train.py: %s: loss.name %r: only cross_entropy is mirrored"
                 % (path, config["loss"]["name"]))
    return config


# ---------------------------------------------------------------------------------------------
# Data: IDX files, as data/idx.cc reads them (gzip or raw).


def read_idx(directory, stem):
    import torch
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                raw = f.read()
            break
    else:
        sys.exit("ddp_train.py: %s/%s[.gz] not found; set data.dir" % (directory, stem))
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit("ddp_train.py: %s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8, offset=4 + 4 * ndim)
    return data.reshape(dims)


def load_split(directory, prefix):
    images = read_idx(directory, prefix + "-images-idx3-ubyte").float().div_(255.0)
    labels = read_idx(directory, prefix + "-labels-idx1-ubyte").long()
    return images.unsqueeze(1).contiguous(), labels  # N x 1 x H x W, like data::loadMnistLike


class Samples:
    """Preloaded samples: batch(rows) gives (inputs, targets) of those sample indices."""

    def __init__(self, inputs, targets):
        self.inputs, self.targets = inputs, targets

    def __len__(self):
        return len(self.targets)

    def batch(self, rows):
        return self.inputs.index_select(0, rows), self.targets.index_select(0, rows)


class TokenWindows:
    """data.format tokens: sample i = tokens [iT, iT + T + 1), inputs the first T, targets the
    last T, both int64 [T]; (tokens - 1) // T samples (data/npy.h TokenExamples)."""

    def __init__(self, path, seq_len):
        import numpy as np
        import torch
        array = np.load(path, allow_pickle=False)
        if array.ndim != 1 or array.dtype.kind not in "iu":
            sys.exit("ddp_train.py: %s: expected a 1-D array of integer token ids, got %s %s"
                     % (path, array.dtype, array.shape))
        self.tokens = torch.from_numpy(array.astype(np.int64 if array.dtype.itemsize > 1
                                                    else np.uint8))
        self.seq_len = seq_len
        self.windows = (len(array) - 1) // seq_len
        if self.windows < 1:
            sys.exit("ddp_train.py: seq_len %d is longer than the token stream %s (%d tokens)"
                     % (seq_len, path, len(array)))
        self.offsets = torch.arange(seq_len + 1)

    def __len__(self):
        return self.windows

    def batch(self, rows):
        windows = self.tokens[rows.unsqueeze(1) * self.seq_len + self.offsets].long()
        return windows[:, :-1], windows[:, 1:]


def load_data(config):
    data = config["data"]
    if data["format"] == "tokens":
        seq_len = int(data["seq_len"])
        if seq_len < 1:
            sys.exit("ddp_train.py: data.seq_len must be at least 1 for data.format tokens")
        return TokenWindows(data["train"], seq_len), TokenWindows(data["test"], seq_len)
    if data["format"] != "idx":
        sys.exit("ddp_train.py: data.format %r: only idx and tokens are mirrored" % data["format"])
    if data["dataset"] not in ("fashion-mnist", "mnist"):
        sys.exit("ddp_train.py: data.dataset %r: only fashion-mnist and mnist are mirrored"
                 % data["dataset"])
    train = load_split(data["dir"], "train")
    test = load_split(data["dir"], "t10k")
    if data["normalize"]:
        # float64 sums over chunks: a float64 copy of the whole set would add ~750 MB to the
        # peak RSS that compare_ddp.sh reports.
        total = squares = 0.0
        pixels = train[0].view(-1)
        for chunk in pixels.split(1 << 22):
            chunk = chunk.double()
            total += chunk.sum().item()
            squares += chunk.pow(2).sum().item()
        mean = total / pixels.numel()
        std = math.sqrt(max(0.0, squares / pixels.numel() - mean * mean))
        train[0].sub_(mean).div_(std)
        test[0].sub_(mean).div_(std)
    return Samples(*train), Samples(*test)


# ---------------------------------------------------------------------------------------------
# Model, optimizer, schedule.


def python_twin(scripted, path):
    """The nn.Module of models/gpt/gpt.py that `path` (gpt_<preset>.pt, made by
    models/gpt/export.py) was scripted from, with its weights: FSDP2 wraps Python modules only."""
    sys.path.insert(0, os.path.join(HERE, "..", "models", "gpt"))
    import gpt
    preset = os.path.basename(path)[len("gpt_"):-len(".pt")]
    if not os.path.basename(path).startswith("gpt_") or preset not in gpt.PRESETS:
        sys.exit("ddp_train.py: --wrap fsdp2 needs a Python module; %s is not a gpt_<preset>.pt "
                 "of models/gpt/export.py" % path)
    model = gpt.Gpt(**gpt.PRESETS[preset])
    model.load_state_dict(scripted.state_dict())
    return model


def build_model(config, input_shape, wrap="ddp"):
    import torch
    m = config["model"]
    if m["name"].startswith("torchscript:"):
        path = m["name"][len("torchscript:"):]
        model = torch.jit.load(path)
        if wrap == "fsdp2":
            model = python_twin(model, path)
        model.train()
        return model
    from reference_models import ConvNet, Mlp
    c, h, w = input_shape
    if m["name"] == "mlp":
        return Mlp(c * h * w, list(m["hidden"]), NUM_CLASSES, float(m["dropout"]))
    if m["name"] == "convnet":
        return ConvNet(list(input_shape), NUM_CLASSES, float(m["dropout"]))
    sys.exit("ddp_train.py: model.name %r: only mlp and convnet are mirrored" % m["name"])


def build_optimizer(config, params):
    import torch
    o = config["optimizer"]
    if o["name"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"],
                               nesterov=bool(o["nesterov"]), weight_decay=o["weight_decay"])
    if o["name"] == "adamw":
        return torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                                 eps=o["eps"], weight_decay=o["weight_decay"])
    sys.exit("ddp_train.py: optimizer.name %r: only sgd and adamw are mirrored" % o["name"])


def schedule_lr(config, step, total_steps):
    """trainer/schedule.cc LrSchedule::lr, line for line."""
    s = config["schedule"]
    base = config["optimizer"]["lr"]
    warmup = s["warmup_steps"]
    if step < warmup:
        return base * (step + 1) / warmup
    t = step - warmup
    if s["name"] == "constant":
        return base
    if s["name"] == "step":
        return base * s["gamma"] ** (t // s["step_size"])
    if s["name"] == "cosine":
        span = max(1, total_steps - warmup)
        if t >= span:
            return s["min_lr"]
        return s["min_lr"] + (base - s["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * t / span))
    sys.exit("ddp_train.py: schedule.name %r unknown" % s["name"])


def intra_op_threads(configured, local_world_size):
    """trainer/run_env.cc intraOpThreads: configured, else usable CPUs / local workers."""
    if configured > 0:
        return configured
    cpus = len(os.sched_getaffinity(0)) or os.cpu_count() or 1
    return max(1, cpus // max(1, local_world_size))


def cross_entropy(outputs, targets, reduction="mean"):
    """[B, C] against class ids [B], or [B, T, V] against token ids [B, T] (per token)."""
    import torch
    return torch.nn.functional.cross_entropy(outputs.reshape(-1, outputs.size(-1)),
                                             targets.reshape(-1), reduction=reduction)


def native_bf16():
    """Whether this CPU has native bfloat16 (the flags cumulus::CpuFeatures reads by cpuid)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def uses_bf16(config):
    precision = config["trainer"]["precision"]
    return precision == "bf16" or (precision == "auto" and native_bf16())


def forward(model, inputs, bf16):
    """The model's outputs, in float32; with bf16 the forward runs under CPU autocast."""
    import torch
    if not bf16:
        return model(inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = model(inputs)
    return outputs.float()


def evaluate(model, test, batch_size, rank, world, bf16=False, lockstep=False):
    """trainer/evaluator.cc: this rank's contiguous share of the test samples, sums all-reduced;
    (mean loss per target, fraction of targets right). `lockstep` (FSDP2, whose forward is a
    collective): every rank runs as many forwards as the largest share needs, the extra ones on
    a sample it then leaves out."""
    import torch
    import torch.distributed as dist
    n = len(test)
    first, last = n * rank // world, n * (rank + 1) // world
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)  # loss, correct, targets
    largest = max(n * (k + 1) // world - n * k // world for k in range(world))
    extra = ((largest + batch_size - 1) // batch_size
             - (last - first + batch_size - 1) // batch_size) if lockstep else 0
    with torch.no_grad():
        for _ in range(extra):
            forward(model, test.batch(torch.arange(first, first + 1))[0], bf16)
        for begin in range(first, last, batch_size):
            inputs, targets = test.batch(torch.arange(begin, min(begin + batch_size, last)))
            outputs = forward(model, inputs, bf16)
            sums[0] += cross_entropy(outputs, targets, reduction="sum").item()
            sums[1] += outputs.argmax(-1).eq(targets).sum().item()
            sums[2] += targets.numel()
    model.train()
    dist.all_reduce(sums)
    return sums[0].item() / sums[2].item(), sums[1].item() / sums[2].item()


def peak_rss_mb():
    """The largest ru_maxrss of any rank, in MiB (Linux reports KiB)."""
    import resource
    import torch
    import torch.distributed as dist
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return peak.item() / 1024.0


# ---------------------------------------------------------------------------------------------
# One rank.


class Timing:
    """Rank 0's clock over the steps after the first `skip`."""

    def __init__(self, skip):
        self.skip, self.seconds, self.samples, self.steps, self.optimizer = skip, 0.0, 0, 0, []

    def add(self, step, seconds, samples, optimizer_seconds):
        if step >= self.skip:
            self.seconds += seconds
            self.samples += samples
            self.steps += 1
            self.optimizer.append(optimizer_seconds)

    def samples_per_sec(self):
        return self.samples / self.seconds if self.seconds > 0 else None

    def summary(self):
        import statistics
        return {
            "samples_per_sec": self.samples_per_sec(), "timed_steps": self.steps,
            "skip_steps": self.skip,
            "step_time_ms": 1000.0 * self.seconds / self.steps if self.steps else None,
            "optimizer_step_ms": (1000.0 * statistics.median(self.optimizer)
                                  if self.optimizer else None),
        }


def epoch_order(config, n, epoch):
    import torch
    if not config["data"]["shuffle"]:
        return torch.arange(n)
    g = torch.Generator().manual_seed(int(config["trainer"]["seed"]) * 1000003 + epoch)
    return torch.randperm(n, generator=g)


def train_step(ddp, optimizer, batch, clip, bf16=False):
    """One optimizer step; (loss, seconds in optimizer.step())."""
    import torch
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=False)
    loss = cross_entropy(forward(ddp, inputs, bf16), targets)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
    begin = time.perf_counter()
    optimizer.step()
    return loss.item(), time.perf_counter() - begin


def join_group(config, backend):
    """Sets the intra-op threads and joins the group of `backend`; (rank, world, threads)."""
    import torch
    import torch.distributed as dist
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    threads = intra_op_threads(int(config["trainer"]["threads"]), local_world)
    torch.set_num_threads(threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if backend == "cumulus":
        import cumulus  # noqa: F401 (registers the backend; PYTHONPATH=build/python)
    dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world, threads


def plan_steps(config, n, world):
    """(global batch, steps per epoch, total steps) for n training samples."""
    t = config["trainer"]
    batch = int(t["global_batch_size"])
    if batch < world:
        sys.exit("ddp_train.py: trainer.global_batch_size %d < world size %d" % (batch, world))
    steps_per_epoch = n // batch if config["data"]["drop_last"] else -(-n // batch)
    total_steps = int(t["epochs"]) * steps_per_epoch
    if int(t["max_steps"]) > 0:
        total_steps = min(total_steps, int(t["max_steps"]))
    return batch, steps_per_epoch, total_steps


def train_rank(config, skip_steps, save_state_dict=None, backend="gloo", wrap="ddp"):
    import torch
    import torch.distributed as dist

    rank, world, threads = join_group(config, backend)
    t = config["trainer"]
    train, test = load_data(config)
    n = len(train)
    batch, steps_per_epoch, total_steps = plan_steps(config, n, world)
    every = int(config["eval"]["every_steps"]) or steps_per_epoch
    eval_batch = int(config["eval"]["batch_size"])

    torch.manual_seed(int(t["seed"]))
    model = build_model(config, tuple(train.inputs.shape[1:]) if isinstance(train, Samples) else (),
                        wrap)
    parameters = sum(p.numel() for p in model.parameters())
    if wrap == "fsdp2":
        # Each transformer block its own FSDP unit (parameters all-gathered before its forward,
        # gradients reduce-scattered after its backward), then the rest.
        from torch.distributed.fsdp import fully_shard
        for block in getattr(model, "blocks", []):
            fully_shard(block)
        fully_shard(model)
        ddp = model
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=float(config["comm"]["bucket_cap_mb"]))
    optimizer = build_optimizer(config, ddp.parameters())
    clip = float(t["grad_clip_norm"])
    bf16 = uses_bf16(config)

    timing = Timing(skip_steps)
    loss_value, evaluation, evaluations = float("nan"), None, []
    start = time.perf_counter()
    perm, epoch = None, -1
    for step in range(total_steps):
        if step // steps_per_epoch != epoch:
            epoch = step // steps_per_epoch
            perm = epoch_order(config, n, epoch)
        k = step % steps_per_epoch
        global_rows = perm[k * batch:(k + 1) * batch]
        size = len(global_rows)
        rows = global_rows[rank * size // world:(rank + 1) * size // world]

        for group in optimizer.param_groups:
            group["lr"] = schedule_lr(config, step, total_steps)
        step_start = time.perf_counter()
        loss_value, optimizer_seconds = train_step(ddp, optimizer, train.batch(rows), clip,
                                                   bf16)
        timing.add(step, time.perf_counter() - step_start, size, optimizer_seconds)
        if not math.isfinite(loss_value):
            sys.exit("ddp_train.py: training diverged at step %d" % (step + 1))
        if rank == 0 and (step + 1) % 100 == 0:
            log("ddp step %d/%d loss %.4f %.1f samples/s" % (
                step + 1, total_steps, loss_value, timing.samples_per_sec() or 0.0))
        if (step + 1) % every == 0 or step + 1 == total_steps:
            evaluation = evaluate(model, test, eval_batch, rank, world, bf16,
                                  lockstep=wrap == "fsdp2")
            evaluations.append({"step": step + 1, "test_loss": evaluation[0],
                                "test_accuracy": evaluation[1]})
            if rank == 0:
                log("ddp eval step %d test_loss %.4f test_accuracy %.4f"
                    % (step + 1, evaluation[0], evaluation[1]))
    train_seconds = time.perf_counter() - start
    peak_mb = peak_rss_mb()

    result = None
    if rank == 0:
        result = {
            "type": "summary", "impl": wrap, "backend": backend,
            "precision": "bf16" if bf16 else "fp32", "steps": total_steps,
            "epochs": total_steps / steps_per_epoch, "test_loss": evaluation[0],
            "test_accuracy": evaluation[1], "wall_seconds": time.perf_counter() - start,
            "train_seconds": train_seconds, "parameters": parameters, "world_size": world,
            "train_loss": loss_value, "peak_rss_mb": peak_mb, "evaluations": evaluations,
            "threads": threads, "torch": torch.__version__,
        }
        result.update(timing.summary())
        if save_state_dict and wrap == "ddp":
            torch.save(dict(model.state_dict()), save_state_dict)
    dist.barrier()
    dist.destroy_process_group()
    return result


# ---------------------------------------------------------------------------------------------
# Launcher.


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def launch(nproc, argv, timeout):
    """Starts `nproc` ranks of this script in the background; returns the first non-zero code."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs, rank_of = [], {}
    for rank in range(nproc):
        env_r = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env_r,
                             stdout=None if rank == 0 else subprocess.DEVNULL)
        procs.append(p)
        rank_of[p.pid] = rank
    deadline = time.time() + timeout
    code = 0
    while procs:
        for p in list(procs):
            rc = p.poll()
            if rc is None:
                continue
            procs.remove(p)
            if rc != 0 and code == 0:
                code = rc
                log("ddp_train.py: rank %d exited with %d; stopping the others"
                    % (rank_of[p.pid], rc))
                for q in procs:
                    q.terminate()
        if time.time() > deadline and procs:
            log("ddp_train.py: ranks still running after %.0f s; killing them" % timeout)
            for q in procs:
                q.kill()
            code = code or 124
        time.sleep(0.05)
    return code


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", help="experiment YAML (preferably cumulus-config check output)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--nproc", type=int, default=0,
                        help="launch this many local ranks (default: be one rank)")
    parser.add_argument("--skip-steps", type=int, default=10,
                        help="leading steps left out of samples/s (default 10)")
    parser.add_argument("--timeout", type=float, default=1800, help="launcher timeout, seconds")
    parser.add_argument("--save-state-dict", metavar="FILE",
                        help="rank 0 saves the trained parameters there (torch.save of a dict "
                             "name -> tensor, as model_state_dict.pt)")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "cumulus"],
                        help="torch.distributed backend under DDP (default gloo; cumulus needs "
                             "PYTHONPATH=build/python, docs/python.md)")
    parser.add_argument("--wrap", default="ddp", choices=["ddp", "fsdp2"],
                        help="DistributedDataParallel (default), or FSDP2's fully_shard on each "
                             "transformer block and the model (a GPT's scripted file is swapped "
                             "for its models/gpt/gpt.py module with the same weights)")
    args = parser.parse_args()

    if args.nproc > 0 and "RANK" not in os.environ:
        rest = [args.config, "--skip-steps", str(args.skip_steps), "--backend", args.backend,
                "--wrap", args.wrap]
        if args.save_state_dict:
            rest += ["--save-state-dict", os.path.abspath(args.save_state_dict)]
        for item in args.set:
            rest += ["--set", item]
        sys.exit(launch(args.nproc, rest, args.timeout))

    config = load_config(args.config, args.set)
    result = train_rank(config, args.skip_steps, args.save_state_dict, args.backend, args.wrap)
    if result is not None:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
