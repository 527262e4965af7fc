"""One rank of a backend test (tests/python/backend_test.py starts WORLD_SIZE of them).

    backend_worker.py CASE [ARGS...]

Each case checks its own answers and exits non-zero with the reason on a wrong one; what the
driver compares across ranks or runs (hashes, timings, error texts) it prints as one JSON line.
"""

import hashlib
import math
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import cumulus

REAL_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
               torch.int64, torch.uint8, torch.int8, torch.int16]
FLOATING = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def report(**values):
    print(json.dumps(values), flush=True)


def expect(name, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        sys.exit(f"rank {dist.get_rank()}: {name}: got {got.tolist()} ({got.dtype}), "
                 f"want {want.tolist()} ({want.dtype})")


def base(n, dtype):
    """1, 2, 3, 4, 5, 1, 2, ...: small integers, exact in every dtype."""
    return (torch.arange(n) % 5 + 1).to(dtype)


def moves(name, one, r, w):
    """The calls that only move bytes, on `one`'s dtype: all_to_all (even, uneven, empty blocks,
    lists), and, with a peer, send/recv around the ring, isend/irecv, batch_isend_irecv and a
    receive from any source. Every value is rank * 8 + destination (+ k): known everywhere."""
    def block(src, dst, rows, width=2):
        return (torch.arange(rows * width) % 2 + src * 8 + dst).to(one.dtype).reshape(rows, width)

    out = torch.zeros(w * 2, 2, dtype=one.dtype)
    dist.all_to_all_single(out, torch.cat([block(r, k, 2) for k in range(w)]))
    expect(f"all_to_all_single {name}", out, torch.cat([block(k, r, 2) for k in range(w)]))

    def rows(src, dst):  # 0, 1 or 2 rows, so that some blocks are empty
        return (src + 2 * dst) % 3
    send_splits = [rows(r, k) for k in range(w)]
    recv_splits = [rows(k, r) for k in range(w)]
    out = torch.zeros(sum(recv_splits), 2, dtype=one.dtype)
    dist.all_to_all_single(out, torch.cat([block(r, k, rows(r, k)) for k in range(w)]),
                           output_split_sizes=recv_splits, input_split_sizes=send_splits)
    expect(f"all_to_all_single uneven {name}", out,
           torch.cat([block(k, r, rows(k, r)) for k in range(w)]))

    outs = [torch.zeros(rows(k, r) + 1, 3, dtype=one.dtype) for k in range(w)]
    dist.all_to_all(outs, [block(r, k, rows(r, k) + 1, 3) for k in range(w)])
    for k in range(w):
        expect(f"all_to_all {name} from {k}", outs[k], block(k, r, rows(k, r) + 1, 3))

    if w == 1:
        return
    after, before = (r + 1) % w, (r - 1) % w
    got = torch.zeros(3, 2, dtype=one.dtype)
    if r % 2 == 0:  # blocking calls, in an order that cannot deadlock
        dist.send(block(r, after, 3), dst=after)
        dist.recv(got, src=before)
    else:
        dist.recv(got, src=before)
        dist.send(block(r, after, 3), dst=after)
    expect(f"send/recv {name}", got, block(before, r, 3))

    # Both directions at once, before anyone waits: each side's receive is posted after its send.
    got = torch.zeros(5, 2, dtype=one.dtype)
    works = [dist.isend(block(r, after, 5), dst=after, tag=3),
             dist.irecv(got, src=before, tag=3)]
    for work in works:
        work.wait()
    expect(f"isend/irecv {name}", got, block(before, r, 5))

    got = torch.zeros(4, 2, dtype=one.dtype)
    ops = [dist.P2POp(dist.irecv, got, before), dist.P2POp(dist.isend, block(r, after, 4), after)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    expect(f"batch_isend_irecv {name}", got, block(before, r, 4))

    # Rank 0 receives one message from each other rank, from whichever sends first.
    if r == 0:
        seen = set()
        for _ in range(w - 1):
            got = torch.zeros(1, 2, dtype=one.dtype)
            source = dist.recv(got)
            expect(f"recv from any source {name}", got, block(source, 0, 1))
            seen.add(source)
        if seen != set(range(1, w)):
            sys.exit(f"recv from any source {name}: the sources were {sorted(seen)}")
    else:
        dist.send(block(r, 0, 1), dst=0)


def collectives():
    """Every collective on every dtype, against sums known in closed form."""
    dist.init_process_group("cumulus")
    r, w = dist.get_rank(), dist.get_world_size()
    n = 7
    triangle = w * (w + 1) // 2
    for dtype in REAL_DTYPES + [torch.complex64]:
        name = str(dtype).replace("torch.", "")
        one = base(n, dtype) if dtype != torch.complex64 else base(n, torch.float32) * (1 + 2j)
        mine = one * (r + 1)

        t = mine.clone()
        dist.all_reduce(t)
        expect(f"all_reduce sum {name}", t, one * triangle)
        if dtype != torch.complex64:
            t = mine.clone()
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            expect(f"all_reduce min {name}", t, one.clone())
            t = mine.clone()
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            expect(f"all_reduce max {name}", t, one * w)
        if dtype in FLOATING:
            t = mine.clone()
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            expect(f"all_reduce avg {name}", t, one * triangle / w)
        if dtype != torch.complex64:
            # 1s and 2s times (rank + 1): every product is 2^k * w!, exact in bfloat16 too.
            ones_twos = (torch.arange(n) % 2 + 1).to(dtype)
            t = ones_twos * (r + 1)
            dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
            expect(f"all_reduce product {name}", t,
                   (ones_twos.double() ** w * math.factorial(w)).to(dtype))
        if dtype not in FLOATING and dtype != torch.complex64:
            # Every rank's own bit pattern, against the three bitwise folds over all of them.
            def bits(rank):
                return ((torch.arange(n) * 5 + rank * 3) % 16).to(dtype)
            for reduce_op, fold in ((dist.ReduceOp.BAND, torch.bitwise_and),
                                    (dist.ReduceOp.BOR, torch.bitwise_or),
                                    (dist.ReduceOp.BXOR, torch.bitwise_xor)):
                t = bits(r)
                dist.all_reduce(t, op=reduce_op)
                want = bits(0)
                for k in range(1, w):
                    want = fold(want, bits(k))
                expect(f"all_reduce {reduce_op} {name}", t, want)

        t = mine.clone()
        dist.broadcast(t, src=w - 1)
        expect(f"broadcast {name}", t, one * w)

        rows = [torch.zeros_like(one) for _ in range(w)]
        dist.all_gather(rows, mine)
        for k in range(w):
            expect(f"all_gather {name} row {k}", rows[k], one * (k + 1))
        flat = torch.zeros(w * n, dtype=one.dtype)
        dist.all_gather_into_tensor(flat, mine)
        expect(f"all_gather_into_tensor {name}", flat, torch.cat([one * (k + 1) for k in range(w)]))

        blocks = [mine + k for k in range(w)]
        out = torch.zeros_like(one)
        dist.reduce_scatter(out, blocks)
        expect(f"reduce_scatter {name}", out, one * triangle + w * r)
        out = torch.zeros_like(one)
        dist.reduce_scatter_tensor(out, torch.cat(blocks))
        expect(f"reduce_scatter_tensor {name}", out, one * triangle + w * r)

        t = mine.clone()
        dist.reduce(t, dst=0)
        expect(f"reduce {name}", t, one * triangle if r == 0 else mine)

        root = min(1, w - 1)
        rows = [torch.zeros_like(one) for _ in range(w)] if r == root else None
        dist.gather(mine, rows, dst=root)
        if r == root:
            for k in range(w):
                expect(f"gather {name} row {k}", rows[k], one * (k + 1))
        out = torch.zeros_like(one)
        dist.scatter(out, [one * (k + 10) for k in range(w)] if r == 0 else None, src=0)
        expect(f"scatter {name}", out, one * (r + 10))

        pair = [mine.clone(), mine[:3].clone()]
        dist.all_reduce_coalesced(pair)
        expect(f"all_reduce_coalesced {name} 0", pair[0], one * triangle)
        expect(f"all_reduce_coalesced {name} 1", pair[1], (one * triangle)[:3])
        moves(name, one, r, w)

    # bool: a sum or max is a logical or, a min a logical and.
    flags = torch.tensor([r == 0, False, True, r == w - 1])
    t = flags.clone()
    dist.all_reduce(t)
    expect("all_reduce sum bool", t, torch.tensor([True, False, True, True]))
    t = flags.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    expect("all_reduce min bool", t, torch.tensor([w == 1, False, True, w == 1]))
    t = flags.clone()
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    expect("all_reduce product bool", t, torch.tensor([w == 1, False, True, w == 1]))
    t = flags.clone()
    dist.all_reduce(t, op=dist.ReduceOp.BXOR)
    expect("all_reduce bxor bool", t, torch.tensor([True, False, w % 2 == 1, True]))
    t = flags.clone()
    dist.broadcast(t, src=0)
    expect("broadcast bool", t, torch.tensor([True, False, True, w == 1]))
    moves("bool", flags, r, w)
    rows = [torch.zeros_like(flags) for _ in range(w)] if r == 0 else None
    dist.gather(flags, rows, dst=0)
    if r == 0:
        for k in range(w):
            expect(f"gather bool row {k}", rows[k], torch.tensor([k == 0, False, True, k == w - 1]))

    # Non-contiguous tensors are reduced in place, through a copy.
    grid = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (r + 1)
    column = grid[:, 1]
    dist.all_reduce(column)
    expect("all_reduce of a column", grid[:, 1],
           torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1] * triangle)

    # Asynchronous work: several in flight, waited for together, in call order.
    tensors = [torch.full((1000,), float(r + k)) for k in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for k, (t, work) in enumerate(zip(tensors, works)):
        work.wait()
        if not work.is_completed():
            sys.exit("a waited Work is not completed")
        expect(f"async all_reduce {k}", t, torch.full((1000,), float(triangle - w + w * k)))
    future = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    expect("the future's value", future.wait()[0], torch.full((3,), float(w)))

    # A sparse (COO) all-reduce, as Gloo's: rank k holds k + 1 entries (so the counts differ),
    # two of them at the same place on every rank; the sum replaces the tensor.
    def sparse_of(k):
        rows = [k % 4] + [(k + j) % 4 for j in range(1, k + 1)]
        return torch.sparse_coo_tensor(torch.tensor([rows, [j % 3 for j in range(k + 1)]]),
                                       torch.arange(1.0, k + 2) * (k + 1), (4, 3))
    t = sparse_of(r)
    dist.all_reduce(t)
    if not t.is_sparse:
        sys.exit("a sparse all_reduce left a dense tensor")
    expect("sparse all_reduce", t.to_dense(), sum(sparse_of(k).to_dense() for k in range(w)))

    # A subgroup of the first and the last rank: a group of its own, meeting through its own
    # prefix of torch's store; the ranks outside it take no part.
    if w >= 2:
        ends = dist.new_group([0, w - 1])
        t = torch.full((3,), float(r + 1))
        if r in (0, w - 1):
            dist.all_reduce(t, group=ends)
            expect("all_reduce in a subgroup", t, torch.full((3,), float(w + 1)))
            # Object collectives on a subgroup (torch asks the backend for its sequence number).
            objects = [None, None]
            dist.all_gather_object(objects, {"rank": r}, group=ends)
            if objects != [{"rank": 0}, {"rank": w - 1}]:
                sys.exit(f"all_gather_object in a subgroup: got {objects}")
        else:
            expect("a rank outside the subgroup", t, torch.full((3,), float(r + 1)))
    objects = [None] * w
    dist.all_gather_object(objects, f"rank {r}")
    if objects != [f"rank {k}" for k in range(w)]:
        sys.exit(f"all_gather_object: got {objects}")
    listed = [r * 10 if r == 0 else None]
    dist.broadcast_object_list(listed, src=0)
    if listed != [0]:
        sys.exit(f"broadcast_object_list: got {listed}")
    dist.barrier()
    report(rank=r, backend=dist.get_backend(), ok=True,
           sequence=dist.distributed_c10d._get_default_group()._get_backend(
               torch.device("cpu"))._get_sequence_number_for_group())


def ddp(steps, out):
    """A small model trained with DDP over the cumulus backend; writes rank 0's parameters."""
    dist.init_process_group("cumulus")
    r, w = dist.get_rank(), dist.get_world_size()
    model = make_model()
    net = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    per_rank = GLOBAL_BATCH // w
    for x, y in batches(steps):
        loss = torch.nn.functional.cross_entropy(net(x[r * per_rank:(r + 1) * per_rank]),
                                                 y[r * per_rank:(r + 1) * per_rank])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if r == 0:
        torch.save(model.state_dict(), out)
    report(rank=r, hash=parameter_hash(model), loss=float(loss))


GLOBAL_BATCH = 24


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def batches(steps):
    g = torch.Generator().manual_seed(11)
    for _ in range(steps):
        yield torch.randn(GLOBAL_BATCH, 32, generator=g), torch.randint(0, 10, (GLOBAL_BATCH,),
                                                                        generator=g)


def parameter_hash(model):
    digest = hashlib.sha256()
    for p in model.state_dict().values():
        digest.update(p.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def killed_peer():
    """Rank 1 is SIGKILLed after one all-reduce; the others report what their next call raised."""
    dist.init_process_group("cumulus")
    r = dist.get_rank()
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if r == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        sys.exit("the all-reduce after the peer's death returned")
    except cumulus.CommError as e:
        first, seconds = str(e), time.monotonic() - start
        fields = [e.op, e.seq, e.peer, e.kind]
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        sys.exit("a call after the failure returned")
    except cumulus.CommError as e:
        second, again = str(e), time.monotonic() - start
    report(rank=r, first=first, fields=fields, seconds=seconds, second=second,
           again_seconds=again)


def bad_calls():
    """Arguments refused when the call is made; the group stays usable after each."""
    dist.init_process_group("cumulus")
    r = dist.get_rank()
    errors = {}

    def refused(name, call):
        try:
            call()
            sys.exit(f"{name}: accepted")
        except (ValueError, RuntimeError) as e:
            errors[name] = f"{type(e).__name__}: {e}"

    refused("bitwise float", lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BOR))
    refused("product complex",
            lambda: dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=dist.ReduceOp.PRODUCT))
    refused("premul sum", lambda: dist.all_reduce(
        torch.ones(2), op=dist._make_nccl_premul_sum(2.0)))
    refused("output size", lambda: dist.all_gather_into_tensor(torch.ones(3), torch.ones(2)))
    refused("list length", lambda: dist.all_gather([torch.ones(2)], torch.ones(2)))
    refused("uneven without splits", lambda: dist.all_to_all_single(torch.zeros(3), torch.zeros(3)))
    refused("splits that do not add up", lambda: dist.all_to_all_single(
        torch.zeros(3), torch.zeros(3), output_split_sizes=[1, 1], input_split_sizes=[1, 2]))
    refused("sparse max", lambda: dist.all_reduce(
        torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (2,)),
        op=dist.ReduceOp.MAX))
    refused("negative tag", lambda: dist.send(torch.ones(1), dst=1 - r, tag=-1))
    t = torch.ones(3)
    dist.all_reduce(t)  # still works
    expect("all_reduce after refusals", t, torch.full((3,), 2.0))
    # A receive of another size than the send: a CommError naming both sizes, and the lane stays
    # usable (the message is dropped).
    if r == 0:
        dist.send(torch.ones(2), dst=1)
        dist.send(torch.full((3,), 7.0), dst=1)
    else:
        try:
            dist.recv(torch.zeros(3), src=0)
            sys.exit("a receive of another size: accepted")
        except cumulus.CommError as e:
            errors["receive size"] = f"CommError: {e}"
        t = torch.zeros(3)
        dist.recv(t, src=0)
        expect("the receive after a mismatch", t, torch.full((3,), 7.0))
    # Different sizes on the two ranks: a CommError on both, not a hang or a wrong sum.
    try:
        dist.all_reduce(torch.ones(4 if r == 0 else 8))
        sys.exit("mismatched sizes: accepted")
    except cumulus.CommError as e:
        errors["mismatched sizes"] = f"CommError: {e}"
    report(rank=r, errors=errors)


def killed_sender():
    """Rank 1 is SIGKILLed while rank 0 waits for its message: the receive fails at once."""
    dist.init_process_group("cumulus")
    r = dist.get_rank()
    dist.barrier()
    if r == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.recv(torch.zeros(4), src=1)
        sys.exit("the receive from a killed peer returned")
    except cumulus.CommError as e:
        report(rank=r, error=str(e), fields=[e.op, e.peer, e.kind],
               seconds=time.monotonic() - start)


def launched(init_method="env://", fail_first_attempt="no", again=""):
    """One rank as a launcher started it (torchrun, cumulus-run, or the driver with tcp:// or
    file://): an all-reduce, a send/recv around the ring and an all_to_all_single, each checked;
    reports the rank, the world and the launcher's restart count. With fail_first_attempt=yes,
    rank 1 of torchrun's first attempt exits 3 after one all-reduce, so that torchrun restarts
    the group and the backend is made afresh in new processes. With `again` (an init method),
    the process then makes a second group through it, after destroying the first, and
    all-reduces on it."""
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if init_method == "env://":
        dist.init_process_group("cumulus")
    else:
        dist.init_process_group("cumulus", init_method=init_method,
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    r, w = dist.get_rank(), dist.get_world_size()
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    expect("all_reduce", t, torch.full((5,), float(w * (w + 1) // 2)))
    if fail_first_attempt == "yes" and restart == 0 and r == 1:
        sys.exit(3)
    if w > 1:
        got = torch.zeros(3)
        works = [dist.isend(torch.full((3,), float(r)), dst=(r + 1) % w),
                 dist.irecv(got, src=(r - 1) % w)]
        for work in works:
            work.wait()
        expect("isend/irecv", got, torch.full((3,), float((r - 1) % w)))
    out = torch.zeros(w)
    dist.all_to_all_single(out, torch.arange(w, dtype=torch.float32) + 10 * r)
    expect("all_to_all_single", out, torch.arange(w, dtype=torch.float32) * 10 + r)
    # Collectives still queued, on tensors only they hold, when the group is destroyed: the
    # backend's thread frees each tensor (and its PyObject) after running it, while this thread
    # holds the GIL in destroy_process_group; that deadlocked until the join released the GIL.
    for _ in range(20):
        dist.all_reduce(torch.ones(1000), async_op=True)
    dist.destroy_process_group()
    if again:
        dist.init_process_group("cumulus", init_method=again, rank=r, world_size=w)
        t = torch.full((2,), float(r + 1))
        dist.all_reduce(t)
        expect("all_reduce on a group made after destroy_process_group", t,
               torch.full((2,), float(w * (w + 1) // 2)))
        dist.destroy_process_group()
    report(rank=r, world=w, restart=restart, ok=True)


def mismatched_dtypes():
    """Rank 0 all-reduces float32, rank 1 int32 of the same byte count: both fail naming the
    dtypes, instead of summing one's bits as the other's."""
    dist.init_process_group("cumulus")
    r = dist.get_rank()
    t = torch.ones(4) if r == 0 else torch.ones(4, dtype=torch.int32)
    try:
        dist.all_reduce(t)
        sys.exit("an all-reduce of float32 against int32 returned")
    except cumulus.CommError as e:
        report(rank=r, error=str(e))


def init_only(timeout_seconds):
    """init_process_group and one all-reduce of 1 + 2^-10 (rounded to 1 in bfloat16); reports the
    sum, or the error the group raised, and the seconds init_process_group took."""
    start = time.monotonic()
    try:
        dist.init_process_group("cumulus", timeout=timedelta(seconds=float(timeout_seconds)))
        seconds = time.monotonic() - start
        t = torch.full((2,), 1 + 2 ** -10)
        dist.all_reduce(t)
        group = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        report(rank=dist.get_rank(), ok=True, algorithm=group.algorithm,
               compression=group.compression, sum=t[0].item(), seconds=seconds)
    except Exception as e:
        report(rank=int(os.environ["RANK"]), error=f"{type(e).__name__}: {e}",
               seconds=time.monotonic() - start)


def stalled_peer(timeout_seconds):
    """Rank 1 stops calling (alive, its sockets open); rank 0's next all-reduce fails after the
    group's timeout, naming it."""
    dist.init_process_group("cumulus", timeout=timedelta(seconds=float(timeout_seconds)))
    r = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    if r == 1:
        time.sleep(3 * float(timeout_seconds))
        report(rank=r, slept=True)
        return
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        sys.exit("the all-reduce with a stalled peer returned")
    except cumulus.CommError as e:
        report(rank=r, error=str(e), seconds=time.monotonic() - start)


def monitored():
    """monitored_barrier on three ranks: passed by all (also with wait_all_ranks); rank 2 absent
    (rank 0 names it, rank 1 learns that rank 0 did not release it); ranks 1 and 2 absent with
    wait_all_ranks (rank 0 names both); a zero timeout. Then a receive's wait(timeout) that runs
    out, and the same receive completed by a later wait(). Between phases, a barrier; at the end
    an all-reduce: a failed monitored barrier does not break the group."""
    dist.init_process_group("cumulus")
    r = dist.get_rank()
    long = timedelta(seconds=60)
    dist.monitored_barrier(timeout=long)
    dist.monitored_barrier(timeout=long, wait_all_ranks=True)
    errors = {}

    def failing(name, call):
        try:
            call()
            sys.exit(f"rank {r}: {name}: returned")
        except cumulus.CommError as e:
            errors[name] = [str(e), e.op, e.peer, e.kind]

    if r != 2:
        failing("absent rank", lambda: dist.monitored_barrier(timeout=timedelta(seconds=0.5)))
    dist.barrier()
    if r == 0:
        failing("absent ranks", lambda: dist.monitored_barrier(timeout=timedelta(seconds=0.3),
                                                               wait_all_ranks=True))
    dist.barrier()
    if r == 0:
        failing("no time", lambda: dist.monitored_barrier(timeout=timedelta(seconds=0)))
    dist.barrier()
    waited = None
    if r == 0:
        got = torch.zeros(3)
        work = dist.irecv(got, src=1, tag=7)
        start = time.monotonic()
        failing("receive wait", lambda: work.wait(timeout=timedelta(seconds=0.3)))
        waited = time.monotonic() - start
        dist.barrier()
        work.wait()
        expect("the receive after a wait that ran out", got, torch.tensor([1.0, 2.0, 3.0]))
    else:
        dist.barrier()
        if r == 1:
            dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=0, tag=7)
    t = torch.ones(2)
    dist.all_reduce(t)
    expect("all_reduce after the monitored barriers", t, torch.full((2,), 3.0))
    dist.destroy_process_group()
    report(rank=r, errors=errors, waited=waited)


def until_file(path):
    """All-reduces and broadcasts until `path` exists (up to 120 s): a DDP script's traffic for
    the live endpoint to show (cumulus-run --metrics-port)."""
    dist.init_process_group("cumulus")
    r = dist.get_rank()
    deadline = time.monotonic() + 120
    rounds = 0
    while True:
        t = torch.ones(1024)
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        rounds += 1
        done = torch.tensor([1.0 if os.path.exists(path) or time.monotonic() > deadline else 0.0])
        dist.all_reduce(done)  # every rank stops after the same round
        if done.item() > 0:
            break
    dist.destroy_process_group()
    report(rank=r, ok=os.path.exists(path), rounds=rounds)


if __name__ == "__main__":
    case, args = sys.argv[1], sys.argv[2:]
    {"collectives": collectives, "ddp": lambda: ddp(int(args[0]), args[1]),
     "killed_peer": killed_peer, "killed_sender": killed_sender, "bad_calls": bad_calls,
     "launched": lambda: launched(*args), "mismatched_dtypes": mismatched_dtypes,
     "init_only": lambda: init_only(args[0]), "stalled_peer": lambda: stalled_peer(args[0]),
     "monitored": monitored, "until_file": lambda: until_file(args[0])}[case]()
