"""Training epoch: gaptui's against a plain PyG loop written here, side by side, at equal epochs.

Run from the repository root (one core, lowest priority; a few minutes per model with the defaults)::

    nice -n 19 taskset -c 1 python benchmarks/bench_epoch.py
    python benchmarks/bench_epoch.py --models gcn,gin --train 500 --epochs 10 --noise 0.12   # quicker
    python benchmarks/bench_epoch.py --profile gin          # torch.profiler table of a few of our steps
    python benchmarks/bench_epoch.py --precision --models gin --train 300 --epochs 4   # fp32 vs bf16
    python benchmarks/bench_epoch.py --versus pyg --precision --models tagcn,sgc,pan,graphgps --epochs 6

Both sides train on the same cached alignment dataset (ER(--n, --degree) at each --noise, --train / --val pairs,
batch --batch-size), with the same optimiser (AdamW, one-cycle to 3e-3 after 30 warm-up steps, value clipping
0.1), the same seed and about the same width:

- **ours**: what a gaptui worker runs (``engine.models.build`` with the defaults, ``PairTensors`` batches,
  ``train_epoch``, ``evaluate`` with the LAP thread pool); ``--ours-options sparse=false`` and the like switch
  model options;
- **compiled** (with ``--compile``): ours through ``torch.compile`` (what ``compile = "auto"`` does for long CPU
  runs), a third model trained alongside; its compile time is printed and left out of the epoch times;
- **bf16** (with ``--precision``): ours as a ``precision = "bf16"`` run trains (the forward pass under bf16
  autocast on PyG's gather/scatter layers, the similarity, loss and LAP in fp32, fp32 weights), trained alongside
  the fp32 "ours" from the same initialisation, so the table shows fp32 and bf16 side by side (epoch time, the
  bf16 / fp32 speed-up and both final accuracies);
- **reference**: the paper package's model and loop, written here with PyG: ``torch_geometric.data.Data`` per
  graph, ``Batch.from_data_list`` per step, G and H embedded in two forward passes, all-ones inputs, a first
  ``GCNConv(1, width)`` (``GINConv(Linear)`` for GIN) then three residual blocks of the family's PyG convolution,
  two GraphNorms over the whole batch (on the state entering the second layer and before the readout), a
  linear readout, padded ``bmm`` similarities and cross-entropy, and the LAP
  (``scipy.optimize.linear_sum_assignment``) per validation pair. Its width is the paper's (Table C.2, about 60k
  parameters each: GCN 128, GIN 93, GAT 128 and GATv2 96 with 8 heads; for ``ggnn`` the package's "GatedGCN",
  ``GatedGraphConv`` of 2 steps at width 48); ``gatedgcn`` (``ResGatedGraphConv``, which the package did not
  have) gets the width at which the reference has gaptui's 60k-parameter budget. ``--reference-width ours``
  builds it at our width instead (fewer parameters than the paper's).

With ``--versus pyg`` the reference is instead the same model at the same width and initialisation built with
``sparse=False`` (PyG's own layers: ``GPSConv``'s ``to_dense_batch`` and ``nn.MultiheadAttention``, ``TAGConv``'s and
``SGConv``'s message passing; for PAN, PyG's ``PANConv`` formula on sparse matrices of the whole batch, as
``torch_sparse`` is not installed), trained by the same loop, so the ratio is that of the layers alone; with
``--precision`` both also train in bf16 ("pyg bf16"), and bf16's ratio is against it.

Epochs alternate (ours, reference, ours, ...) so background load hits both alike. Per model and noise level the
table gives the min and median seconds of a training epoch of each side (the first epoch is a warm-up and left
out), the ratio reference / ours (above 1: ours is faster) and the final validation LAP accuracy of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from scipy.optimize import linear_sum_assignment  # noqa: E402
from torch import nn  # noqa: E402
from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.nn import (  # noqa: E402
    GATConv,
    GatedGraphConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GraphNorm,
    ResGatedGraphConv,
)
from torch_geometric.utils import to_dense_batch  # noqa: E402

from engine import models  # noqa: E402
from engine.alignment.datasets import DatasetSpec, build_dataset  # noqa: E402
from engine.alignment.training import (  # noqa: E402
    FEATURES,
    IGNORE,
    PairTensors,
    compile_model,
    evaluate,
    train_epoch,
)
from engine.evaluation import LapEvaluator  # noqa: E402
from engine.loop import TrainState, epoch_order, make_optimiser  # noqa: E402
from engine.memory import flush_denormals, tune_allocator  # noqa: E402

LR, WEIGHT_DECAY, CLIP, WARMUP = 3e-3, 0.01, 0.1, 30


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gcn,gin,gatedgcn,ggnn,gat,gatv2")
    parser.add_argument("--noise", default="0.04,0.12", help="comma-separated noise levels")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--degree", type=float, default=8.0)
    parser.add_argument("--train", type=int, default=1000, help="training pairs")
    parser.add_argument("--val", type=int, default=200, help="validation pairs")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=20, help="epochs of each side (timed after the first)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ours-options", default="", help="model options of ours, e.g. sparse=false")
    parser.add_argument(
        "--features",
        choices=sorted(FEATURES),
        default="degree",
        help="node inputs of ours (the reference always takes all-ones inputs); with --ours-options "
        "norm=whole-batch,input_layer=conv and --features ones, ours has the reference's architecture",
    )
    parser.add_argument(
        "--reference-width",
        choices=("paper", "ours"),
        default="paper",
        help="the reference's width: the paper's Table C.2 (default) or ours",
    )
    parser.add_argument("--compile", action="store_true", help="also time ours through torch.compile")
    parser.add_argument("--precision", action="store_true", help="also time ours in bf16 (precision = bf16)")
    parser.add_argument("--datasets", type=Path, default=Path("bench-epoch-datasets"))
    parser.add_argument("--profile", metavar="MODEL", help="profile a few of our training steps and stop")
    parser.add_argument(
        "--versus",
        choices=("paper", "pyg"),
        default="paper",
        help="the reference: the paper package's loop (default) or the same model with PyG's layers (sparse=false)",
    )
    return parser.parse_args(argv)


def parse_options(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = item.partition("=")
        low = value.lower()
        out[key] = True if low == "true" else False if low == "false" else int(value) if value.isdigit() else value
    return out


# ------------------------------------------------------------------------------------------------ reference


#: The paper package's width of each model (Table C.2; 8 attention heads), with the steps of its "GatedGCN"
#: (``GatedGraphConv``, compared with ``ggnn``). ``gatedgcn`` is not in the package: see :func:`reference_width`.
PAPER_WIDTHS = {"gcn": 128, "gin": 93, "gat": 128, "gatv2": 96, "ggnn": 48}
PAPER_GGNN_STEPS = 2
PAPER_HEADS = 8


def reference_width(model: str, budget: int = 60_000) -> int:
    """The paper's width for ``model``, or the width at which the reference has about ``budget`` parameters."""
    if model in PAPER_WIDTHS:
        return PAPER_WIDTHS[model]
    return min(range(8, 257), key=lambda w: abs(models.count_parameters(Reference(model, w, 1, 64)) - budget))


class Reference(nn.Module):
    """The paper package's siamese embedder in PyG: first conv from the constant input, 3 residual blocks, two
    GraphNorms over the batch (entering the second layer, and before the readout)."""

    def __init__(self, model: str, width: int, heads: int, out_dim: int, ggnn_steps: int = 1) -> None:
        super().__init__()

        def conv() -> nn.Module:
            if model == "gcn":
                return GCNConv(width, width)
            if model == "gin":
                return GINConv(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)))
            if model == "gatedgcn":
                return ResGatedGraphConv(width, width)
            if model == "ggnn":
                return GatedGraphConv(width, num_layers=ggnn_steps)
            if model == "gat":
                return GATConv(width, width // heads, heads=heads)
            if model == "gatv2":
                return GATv2Conv(width, width // heads, heads=heads)
            raise SystemExit(f"error: --models {model}: no reference implementation")

        self.first = GINConv(nn.Linear(1, width)) if model == "gin" else GCNConv(1, width)
        self.convs = nn.ModuleList(conv() for _ in range(3))
        self.norm_in = GraphNorm(width)
        self.norm = GraphNorm(width)
        self.out = nn.Linear(width, out_dim)

    def forward(self, data: Batch) -> torch.Tensor:
        h = self.norm_in(F.relu(self.first(data.x, data.edge_index)))
        for conv in self.convs:
            h = h + F.relu(conv(h, data.edge_index))
        return self.out(self.norm(h))


def graphs(split: Any) -> tuple[list[Data], list[Data], list[torch.Tensor]]:
    """The pairs of a ``PairSplit`` as PyG ``Data`` objects with all-ones inputs, and each pair's permutation."""
    g_list, h_list, perms = [], [], []
    for i in range(len(split.num_nodes)):
        n = int(split.num_nodes[i])
        lo, hi = split.node_ptr[i], split.node_ptr[i + 1]
        for edges, ptr, out in (
            (split.edge_index_g, split.edge_ptr_g, g_list),
            (split.edge_index_h, split.edge_ptr_h, h_list),
        ):
            ei = torch.as_tensor(np.asarray(edges[:, ptr[i] : ptr[i + 1]], dtype=np.int64))
            out.append(Data(x=torch.ones(n, 1), edge_index=ei, num_nodes=n))
        perms.append(torch.as_tensor(np.asarray(split.perm[lo:hi], dtype=np.int64)))
    return g_list, h_list, perms


def reference_sim(model: Reference, gs: list[Data], hs: list[Data]) -> tuple[torch.Tensor, torch.Tensor]:
    bg, bh = Batch.from_data_list(gs), Batch.from_data_list(hs)
    xg, mask = to_dense_batch(model(bg), bg.batch)
    xh, _ = to_dense_batch(model(bh), bh.batch)
    sim = torch.bmm(xg, xh.transpose(1, 2)).masked_fill(~mask[:, None, :], float("-inf"))
    return sim, mask


def reference_epoch(
    model: Reference, opt: Any, sched: Any, data: tuple, batch_size: int, seed: int, epoch: int
) -> None:
    gs, hs, perms = data
    model.train()
    order = epoch_order(seed, epoch, len(gs)).tolist()
    for lo in range(0, len(order), batch_size):
        ids = order[lo : lo + batch_size]
        sim, mask = reference_sim(model, [gs[i] for i in ids], [hs[i] for i in ids])
        target = torch.full(mask.shape, IGNORE, dtype=torch.long)
        for row, i in enumerate(ids):
            target[row, : len(perms[i])] = perms[i]
        size, nmax, _ = sim.shape
        loss = F.cross_entropy(sim.reshape(size * nmax, nmax), target.reshape(-1), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), CLIP)
        opt.step()
        sched.step()


@torch.no_grad()
def reference_accuracy(model: Reference, data: tuple, batch_size: int) -> float:
    gs, hs, perms = data
    model.eval()
    correct = total = 0
    for lo in range(0, len(gs), batch_size):
        sim, mask = reference_sim(model, gs[lo : lo + batch_size], hs[lo : lo + batch_size])
        for row, perm in enumerate(perms[lo : lo + batch_size]):
            n = len(perm)
            _, cols = linear_sum_assignment(-sim[row, :n, :n].numpy())
            correct += int((torch.as_tensor(cols) == perm).sum())
            total += n
    return correct / max(total, 1)


# ------------------------------------------------------------------------------------------------ comparison


def compare(args: argparse.Namespace, model_name: str, noise: float, evaluator: LapEvaluator) -> dict[str, Any]:
    spec = DatasetSpec("er", noise, n_train=args.train, n_val=args.val, params={"n": args.n, "degree": args.degree})
    dataset, _ = build_dataset(spec, args.datasets)
    train, val = PairTensors(dataset.split("train")), PairTensors(dataset.split("val"))
    steps = args.epochs * -(-len(train) // args.batch_size)
    paper = args.versus == "paper"

    options = parse_options(args.ours_options)
    ours = models.build(model_name, out_dim=64, budget=60_000, in_dim=FEATURES[args.features], **options)
    if paper:
        ref_train, ref_val = graphs(dataset.split("train")), graphs(dataset.split("val"))
        if args.reference_width == "paper":
            width, heads = reference_width(model_name), PAPER_HEADS if model_name in ("gat", "gatv2") else 1
            ggnn_steps = PAPER_GGNN_STEPS
        else:
            width, heads, ggnn_steps = ours.width, getattr(ours, "heads", 1), getattr(ours, "steps", 1)
        torch.manual_seed(args.seed)
        ref = Reference(model_name, width, heads, 64, ggnn_steps=ggnn_steps)
    sides: dict[str, tuple[torch.nn.Module, torch.nn.Module, Any, Any, TrainState]] = {}
    compile_seconds = None
    names = ["ours", *(("compiled",) if args.compile else ()), *(("bf16",) if args.precision else ())]
    if args.versus == "pyg":
        names += ["pyg", *(("pyg bf16",) if args.precision else ())]
    for side in names:
        torch.manual_seed(args.seed)
        side_options = {**options, "width": ours.width, "sparse": False} if side.startswith("pyg") else options
        if side.startswith("pyg") and hasattr(ours, "heads"):
            side_options["heads"] = ours.heads
        model = models.build(model_name, out_dim=64, budget=60_000, in_dim=FEATURES[args.features], **side_options)
        trained = model
        if side == "compiled":
            # A fresh compiler cache per model: one process compiles several models of different widths and
            # layer types, which would otherwise hit dynamo's recompile limit and silently run eagerly.
            torch._dynamo.reset()
            t0 = time.perf_counter()
            trained = compile_model(model, args.features, lambda line: None)
            compile_seconds = time.perf_counter() - t0
        sides[side] = (model, trained, *make_optimiser(model, LR, WEIGHT_DECAY, steps, WARMUP), TrainState())
    if paper:
        ref_opt, ref_sched = make_optimiser(ref, LR, WEIGHT_DECAY, steps, WARMUP)
    times: dict[str, list[float]] = {side: [] for side in (*sides, *(("reference",) if paper else ()))}
    for epoch in range(1, args.epochs + 1):
        for side, (_, trained, opt, sched, state) in sides.items():
            t0 = time.perf_counter()
            train_epoch(
                trained,
                train,
                opt,
                sched,
                state,
                batch_size=args.batch_size,
                seed=args.seed,
                clip=CLIP,
                clip_mode="value",
                features=args.features,
                precision="bf16" if side.endswith("bf16") else "fp32",
            )
            state.epoch += 1
            state.batch_in_epoch = 0
            if epoch > 1 or args.epochs == 1:
                times[side].append(time.perf_counter() - t0)
        if not paper:
            continue
        t0 = time.perf_counter()
        reference_epoch(ref, ref_opt, ref_sched, ref_train, args.batch_size, args.seed, epoch)
        if epoch > 1 or args.epochs == 1:
            times["reference"].append(time.perf_counter() - t0)
    accuracy = {
        side: evaluate(model, val, args.batch_size, evaluator, args.features)[0].lap_acc
        for side, (model, *_) in sides.items()
    }
    if paper:
        accuracy["reference"] = reference_accuracy(ref, ref_val, args.batch_size)
    else:
        width, ref = ours.width, sides["pyg"][0]
    return {
        "model": model_name,
        "noise": noise,
        "width": (ours.width, width),
        "params": (models.count_parameters(ours), models.count_parameters(ref)),
        "times": times,
        "acc": accuracy,
        "compile_seconds": compile_seconds,
    }


def baseline_of(side: str, times: dict[str, list[float]]) -> str | None:
    """The side ``side`` is measured against: the paper's loop, or PyG's layers in the same precision."""
    if "reference" in times:
        return None if side == "reference" else "reference"
    if side.startswith("pyg"):
        return None
    return "pyg bf16" if side == "bf16" and "pyg bf16" in times else "pyg"


def cells(row: dict[str, Any]) -> list[str]:
    """One progress line's parts: each side's median epoch, its speed-up, and the accuracies."""
    out = []
    for side, values in row["times"].items():
        median, base = statistics.median(values), baseline_of(side, row["times"])
        ref = statistics.median(row["times"][base]) if base else None
        out.append(f"{side} {median:6.2f} s" + (f" ({ref / median:4.2f}x)" if ref else ""))
    out.append("LAP acc " + " / ".join(f"{100 * acc:5.1f}" for acc in row["acc"].values()))
    return out


def profile(args: argparse.Namespace) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    noise = float(args.noise.split(",")[-1])
    spec = DatasetSpec("er", noise, n_train=args.train, n_val=1, params={"n": args.n, "degree": args.degree})
    dataset, _ = build_dataset(spec, args.datasets)
    train = PairTensors(dataset.split("train"))
    torch.manual_seed(args.seed)
    model = models.build(
        args.profile, out_dim=64, budget=60_000, in_dim=FEATURES["degree"], **parse_options(args.ours_options)
    )
    opt, sched = make_optimiser(model, LR, WEIGHT_DECAY, 1000, WARMUP)
    state = TrainState()
    train_epoch(
        model, train, opt, sched, state, batch_size=args.batch_size, seed=args.seed, clip=CLIP, clip_mode="value"
    )
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        state.epoch, state.batch_in_epoch = 1, 0
        train_epoch(
            model, train, opt, sched, state, batch_size=args.batch_size, seed=args.seed, clip=CLIP, clip_mode="value"
        )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # As a worker does, for both sides alike, before torch starts its threads; GAPTUI_MALLOC=default and
    # GAPTUI_DENORMALS=keep measure with the process's own settings.
    flushed = flush_denormals()
    tuned = tune_allocator()
    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args)
        return 0
    rows = []
    load = os.getloadavg()[0]
    with LapEvaluator(workers=args.threads) as evaluator:
        for model_name in args.models.split(","):
            for noise in (float(x) for x in args.noise.split(",")):
                row = compare(args, model_name.strip(), noise, evaluator)
                rows.append(row)
                print(f"{row['model']:>9} eta={noise:<5g} " + "  ".join(cells(row)), flush=True)
    print()
    print(
        f"ER({args.n}, {args.degree:g}), {args.train} / {args.val} pairs, batch {args.batch_size}, {args.epochs} "
        f"epochs, {args.threads} thread(s), seed {args.seed}; options {args.ours_options or 'defaults'}, "
        + (f"reference at {args.reference_width} widths, " if args.versus == "paper" else "versus PyG's layers, ")
        + f"{args.features} inputs; "
        f"allocator {'tuned (engine.memory.tune_allocator)' if tuned else 'glibc defaults'}; "
        f"subnormal floats {'flushed (engine.memory.flush_denormals)' if flushed else 'kept'}; "
        f"load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at end. Epoch seconds: min / median; "
        "speed-up: reference median / ours median; LAP accuracy after the last epoch, in percent."
    )
    print()
    every = list(rows[0]["times"])
    sides = [side for side in every if baseline_of(side, rows[0]["times"])]
    bases = [side for side in every if side not in sides]
    head = ["model", "noise", "width ours / ref", "params ours / ref", *(f"{side} s" for side in bases)]
    for side in sides:
        head += [f"{side} s", f"{side} speed-up"]
    head += [f"LAP acc {side}" for side in every]
    if args.compile:
        head.append("compile s")
    if args.precision:
        head.append("bf16 / fp32 speed-up")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        times = row["times"]
        widths = f"{row['width'][0]} / {row['width'][1]}"
        line = [row["model"], f"{row['noise']:g}", widths, f"{row['params'][0]:,} / {row['params'][1]:,}"]
        line += [f"{min(times[side]):.2f} / {statistics.median(times[side]):.2f}" for side in bases]
        for side in sides:
            ref = statistics.median(times[baseline_of(side, times)])  # type: ignore[index]
            line += [
                f"{min(times[side]):.2f} / {statistics.median(times[side]):.2f}",
                f"{ref / statistics.median(times[side]):.2f}x",
            ]
        line += [f"{100 * row['acc'][side]:.1f}" for side in every]
        if args.compile:
            line.append(f"{row['compile_seconds']:.1f}")
        if args.precision:
            line.append(f"{statistics.median(times['ours']) / statistics.median(times['bf16']):.2f}x")
        print("| " + " | ".join(line) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
