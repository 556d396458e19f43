"""Training benchmark: throughput per model, LAP evaluation cost, and batched dense loss against a per-pair loop.

Run from the repository root::

    python benchmarks/bench_training.py                      # every built-in model, defaults below
    python benchmarks/bench_training.py --models gcn,gin     # a subset
    python benchmarks/bench_training.py --pairs 200 --val 200 --repeats 2   # quicker

Setting: ER(100, 8), eta = 0.12 (``build_dataset(DatasetSpec("er", 0.12, n_train=--pairs, n_val=--val))``
into a temp dir), batch 100, CPU, degree features, the default budget (60k parameters) and out_dim 64, the
optimiser of a real run (AdamW + one-cycle, value clipping 0.1). Per model, interleaved within each repeat
(best of ``--repeats`` reported) so that background load hits all measurements alike:

- **train**: ``train_epoch`` over ``--pairs`` pairs after one warm-up batch (excluded) -> pairs/s and the
  extrapolated seconds of one 5,000-pair epoch (``--epoch-pairs``);
- **eval**: ``evaluate`` with a :class:`LapEvaluator` (thread pool) over ``--val`` pairs -> seconds, and the
  ratio to one extrapolated training epoch (target < 10%);
- **dense vs loop**: ``similarity`` + ``alignment_loss`` forward + backward on one gathered batch of 100
  pairs, against a per-pair loop (embed G and H separately, ``S = X_G X_H^T``, cross-entropy, summed, one
  backward) on the same pairs and weights; both losses must agree.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine import models  # noqa: E402
from engine.alignment.datasets import DatasetSpec, build_dataset  # noqa: E402
from engine.alignment.training import (  # noqa: E402
    FEATURES,
    PairTensors,
    SiameseBatch,
    alignment_loss,
    evaluate,
    node_features,
    similarity,
    train_epoch,
)
from engine.evaluation import LapEvaluator  # noqa: E402
from engine.loop import TrainState, make_optimiser  # noqa: E402

FEATURE_KIND = "degree"
LR, WEIGHT_DECAY, CLIP, CLIP_MODE, WARMUP = 3e-3, 0.01, 0.1, "value", 30


def load_str() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)] if rows else map(len, header)
    widths = list(widths)
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def per_pair_tensors(
    data: PairTensors, ids: torch.Tensor
) -> list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(n, edge_index_g, edge_index_h, perm)`` per pair, local ids, prepared outside the timed loop."""
    out = []
    for p in ids.tolist():
        n = int(data.num_nodes[p])
        eg = data.edge_index_g[:, data.edge_ptr_g[p] : data.edge_ptr_g[p + 1]].contiguous()
        eh = data.edge_index_h[:, data.edge_ptr_h[p] : data.edge_ptr_h[p + 1]].contiguous()
        perm = data.perm[data.node_ptr[p] : data.node_ptr[p + 1]].contiguous()
        out.append((n, eg, eh, perm))
    return out


def dense_step(model: torch.nn.Module, batch: SiameseBatch) -> float:
    model.zero_grad(set_to_none=True)
    sim, _ = similarity(model, batch, FEATURE_KIND)
    loss = alignment_loss(sim, batch.target)
    loss.backward()
    return float(loss.detach())


def loop_step(model: torch.nn.Module, pairs: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
    """The obvious per-pair implementation: two forward passes and one small similarity per pair."""
    model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    nodes = 0
    for n, eg, eh, perm in pairs:
        zeros = torch.zeros(n, dtype=torch.long)
        xg = model(node_features(FEATURE_KIND, eg, n), eg, zeros)
        xh = model(node_features(FEATURE_KIND, eh, n), eh, zeros)
        total = total + F.cross_entropy(xg @ xh.T, perm, reduction="sum")
        nodes += n
    loss = total / nodes
    loss.backward()
    return float(loss.detach())


@torch.no_grad()
def forward_only(model: torch.nn.Module, data: PairTensors, batch_size: int) -> None:
    """What :func:`evaluate` computes besides the metrics: similarities and the loss, no LAP."""
    model.eval()
    for batch in data.batches(batch_size):
        sim, mask = similarity(model, batch, FEATURE_KIND)
        float(alignment_loss(sim, batch.target))
        sim.masked_fill(~mask[:, None, :], 0.0).float().cpu()
    model.train()


def bench_model(
    name: str, train: PairTensors, val: PairTensors, evaluator: LapEvaluator, args: argparse.Namespace
) -> dict[str, Any]:
    torch.manual_seed(0)
    model = models.build(name, out_dim=args.out_dim, budget=args.budget, in_dim=FEATURES[FEATURE_KIND])
    params = models.count_parameters(model)
    steps = -(-len(train) // args.batch)
    opt, sched = make_optimiser(model, LR, WEIGHT_DECAY, (args.repeats + 1) * steps + 1, WARMUP)
    state = TrainState()

    # Warm-up: one training batch (excluded), through the same train_epoch code path.
    allowed = iter([False, True])
    train_epoch(
        model, train, opt, sched, state, batch_size=args.batch, seed=0, clip=CLIP, clip_mode=CLIP_MODE,
        should_stop=lambda: next(allowed, True),
    )  # fmt: skip

    cmp_ids = torch.arange(min(args.batch, len(train)))
    batch = train.gather(cmp_ids)
    pairs = per_pair_tensors(train, cmp_ids)

    t_train, t_eval, t_fwd, t_dense, t_loop = [], [], [], [], []
    loss_dense = loss_loop = math.nan
    for rep in range(args.repeats):
        state = TrainState(epoch=rep + 1, step=state.step)
        t = time.perf_counter()
        train_epoch(model, train, opt, sched, state, batch_size=args.batch, seed=0, clip=CLIP, clip_mode=CLIP_MODE)
        t_train.append(time.perf_counter() - t)

        t = time.perf_counter()
        scores, _ = evaluate(model, val, args.batch, evaluator, FEATURE_KIND)
        t_eval.append(time.perf_counter() - t)

        t = time.perf_counter()
        forward_only(model, val, args.batch)
        t_fwd.append(time.perf_counter() - t)

        t = time.perf_counter()
        loss_dense = dense_step(model, batch)
        t_dense.append(time.perf_counter() - t)

        if not args.skip_loop:
            t = time.perf_counter()
            loss_loop = loop_step(model, pairs)
            t_loop.append(time.perf_counter() - t)
    model.zero_grad(set_to_none=True)

    train_s = min(t_train)
    per_pair = train_s / len(train)
    epoch_s = per_pair * args.epoch_pairs
    eval_s = min(t_eval)
    return {
        "model": name,
        "params": params,
        "width": int(getattr(model, "width", 0) or 0),
        "pairs_per_s": len(train) / train_s,
        "epoch_s": epoch_s,
        "eval_s": eval_s,
        "eval_ratio": eval_s / epoch_s,
        "fwd_s": min(t_fwd),
        "dense_s": min(t_dense),
        "loop_s": min(t_loop) if t_loop else math.nan,
        "loss_dense": loss_dense,
        "loss_loop": loss_loop,
        "lap_acc": scores.lap_acc,
        "load": load_str(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(models.names()), help="comma-separated (default: all built-ins)")
    ap.add_argument("--pairs", type=int, default=500, help="training pairs timed per repeat (default 500)")
    ap.add_argument("--val", type=int, default=500, help="validation pairs evaluated (default 500)")
    ap.add_argument("--epoch-pairs", type=int, default=5000, help="epoch size to extrapolate to (default 5000)")
    ap.add_argument("--batch", type=int, default=100, help="batch size (default 100)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per measurement, best reported (default 3)")
    ap.add_argument("--budget", type=int, default=models.DEFAULT_BUDGET, help="parameter budget (default 60000)")
    ap.add_argument("--out-dim", type=int, default=64, help="embedding size (default 64, ER's)")
    ap.add_argument("--eta", type=float, default=0.12, help="noise level (default 0.12)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--skip-loop", action="store_true", help="skip the per-pair loop comparison")
    args = ap.parse_args()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in models.names()]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(models.names())}")
    if args.threads:
        torch.set_num_threads(args.threads)

    load_start = load_str()
    print(
        f"bench_training: torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
        f"{len(os.sched_getaffinity(0))} usable cores, pid {os.getpid()}"
    )
    print(f"load average (1/5/15 min) at start: {load_start}")
    work = Path(tempfile.mkdtemp(prefix="gaptui-bench-train-"))
    results = []
    t0 = time.perf_counter()
    try:
        spec = DatasetSpec("er", args.eta, n_train=args.pairs, n_val=args.val)
        ds, _ = build_dataset(spec, work)
        train = PairTensors(ds.split("train"))
        val = PairTensors(ds.split("val"))
        print(f"dataset {ds.id}: {len(train)} train / {len(val)} val pairs, ER(100, 8), eta {args.eta:g}")
        with LapEvaluator() as evaluator:
            print(f"LapEvaluator: {evaluator.kind} pool, {evaluator.workers} workers")
            for name in names:
                t = time.perf_counter()
                r = bench_model(name, train, val, evaluator, args)
                results.append(r)
                print(
                    f"  {name:9s} {r['pairs_per_s']:7.1f} pairs/s  epoch {r['epoch_s']:6.1f} s  "
                    f"eval {r['eval_s']:5.2f} s (fwd {r['fwd_s']:4.2f})  "
                    f"dense {r['dense_s']:.3f} s  loop {r['loop_s']:.3f} s  "
                    f"({time.perf_counter() - t:.0f} s, load {r['load']})",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    load_end = load_str()

    table(
        f"Training and evaluation, ER(100, 8), eta {args.eta:g}, batch {args.batch}, CPU "
        f"(train timed on {args.pairs} pairs, epoch extrapolated to {args.epoch_pairs}; eval {args.val} pairs; "
        f"best of {args.repeats})",
        ["model", "params", "pairs/s", "epoch (s)", "eval (s)", "of which fwd", "eval/epoch", "< 10%", "LAP acc"],
        [
            [
                r["model"],
                f"{r['params']:,}",
                f"{r['pairs_per_s']:.1f}",
                f"{r['epoch_s']:.1f}",
                f"{r['eval_s']:.2f}",
                f"{r['fwd_s']:.2f}",
                f"{100 * r['eval_ratio']:.1f}%",
                "yes" if r["eval_ratio"] < 0.10 else "NO",
                f"{r['lap_acc']:.3f}",
            ]
            for r in results
        ],
    )
    if not args.skip_loop:
        table(
            f"Dense padded similarity + loss vs per-pair loop, {args.batch} pairs, forward + backward (best of "
            f"{args.repeats})",
            ["model", "dense (ms)", "loop (ms)", "loop / dense", "loss dense", "loss loop", "|diff|"],
            [
                [
                    r["model"],
                    f"{1000 * r['dense_s']:.1f}",
                    f"{1000 * r['loop_s']:.1f}",
                    f"{r['loop_s'] / r['dense_s']:.1f}x",
                    f"{r['loss_dense']:.5f}",
                    f"{r['loss_loop']:.5f}",
                    f"{abs(r['loss_dense'] - r['loss_loop']):.1e}",
                ]
                for r in results
            ],
        )
    ratios = np.array([r["eval_ratio"] for r in results])
    met = int((ratios < 0.10).sum())
    print(
        f"\nSummary: eval of {args.val} pairs < 10% of a {args.epoch_pairs}-pair epoch for {met}/{len(results)} "
        f"models (worst {100 * ratios.max():.1f}%, {results[int(ratios.argmax())]['model']})"
    )
    if not args.skip_loop:
        speed = np.array([r["loop_s"] / r["dense_s"] for r in results])
        agree = all(abs(r["loss_dense"] - r["loss_loop"]) <= 1e-4 * max(1.0, abs(r["loss_dense"])) for r in results)
        print(
            f"         dense batch vs per-pair loop: {speed.min():.1f}x .. {speed.max():.1f}x faster "
            f"(median {np.median(speed):.1f}x); losses agree: {'yes' if agree else 'NO'}"
        )
    print(f"load average (1/5/15 min): start {load_start}, end {load_end}; wall time {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
