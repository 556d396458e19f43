"""Memory of one training step: the measured peak against the estimate the launch and the scheduler use.

Run from the repository root (one torch thread, nice; about 2 minutes for the four default models)::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_memory.py
    python benchmarks/bench_memory.py --models gcn,gatv2 --pairs 50 --n 332 --degree 33

Setting: pairs shaped like the mouse connectomes of the ``connectome`` base (ER graphs of ``--n`` 332 nodes, mean
degree ``--degree`` 33, ``add_remove`` noise 0.19; ``build_dataset`` into a temp folder, no download), a batch of
``--pairs`` 100 pairs. Each model runs in a fresh process that loads the dataset, builds the model as a run does
(60k parameters), sets the worker's allocator (:func:`engine.memory.tune_allocator`) and takes ``--steps`` training
steps (forward, loss, backward, AdamW step); its peak resident memory (``ru_maxrss``) is printed beside:

- **before**: the estimate before the step footprints: four float32 copies of the similarity ``S [B, n, n]`` and
  512 bytes per node, plus what the model declared (dense matrices of GraphGPS and PAN only);
- **after**: :func:`engine.alignment.memory.estimate` now: the tensors autograd saves per node and per edge,
  measured on tiny batches (:mod:`engine.models.footprint`), the allocator's slack and the process itself.

The ratio columns are measured peak / estimate: above 1 the estimate is short (a grid of several such runs can
exhaust the machine's memory), below 1 it is conservative.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, resource, sys, torch
sys.path.insert(0, {root!r})
from engine.memory import flush_denormals, tune_allocator
tune_allocator(); flush_denormals(); torch.set_num_threads(1)
from engine import models
from engine.alignment.datasets import open_dataset
from engine.alignment.training import FEATURES, PairTensors, alignment_loss, similarity
data = PairTensors(open_dataset({folder!r}).split("train"))
torch.manual_seed(0)
model = models.build({model!r}, out_dim=64, budget=60000, in_dim=FEATURES["degree"])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for step in range({steps}):
    batch = data.gather(torch.arange({pairs}))
    sim, mask = similarity(model, batch, "degree")
    loss = alignment_loss(sim, batch.target)
    opt.zero_grad(); loss.backward(); opt.step()
    del sim, mask, loss, batch
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"peak": peak * 1024, "before_step": base * 1024}}))
"""


def gb(n: float) -> str:
    return f"{n / 2**30:6.2f}"


def old_estimate(spec: object, nodes: float) -> int:
    """The batch estimate before the step footprints (its formula, kept here for the comparison)."""
    from engine.models import MODELS

    b = spec.batch_size  # type: ignore[attr-defined]
    batch = 4 * 4 * b * nodes * nodes + 2 * b * nodes * 512
    cls = MODELS.get(spec.model)  # type: ignore[attr-defined]
    return int(batch + cls.batch_bytes(cls.resolve_options({}), 2 * b, nodes))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gcn,gin,gatedgcn,gatv2")
    ap.add_argument("--pairs", type=int, default=100, help="pairs in the batch (default 100, a run's batch)")
    ap.add_argument("--n", type=int, default=332, help="nodes per graph (default 332, the atlas)")
    ap.add_argument("--degree", type=float, default=33.1, help="mean degree (default 33.1, density 0.1)")
    ap.add_argument("--noise", type=float, default=0.19)
    ap.add_argument("--steps", type=int, default=2, help="training steps per model (default 2)")
    args = ap.parse_args()

    from engine.alignment.datasets import DatasetSpec, build_dataset
    from engine.alignment.memory import estimate
    from engine.alignment.spec import RunSpec

    print(f"bench_memory: load average {os.getloadavg()}, batch of {args.pairs} pairs, ER({args.n}, {args.degree})")
    work = Path(tempfile.mkdtemp(prefix="gaptui-bench-memory-"))
    params = {"n": args.n, "degree": args.degree}
    ds, _ = build_dataset(DatasetSpec("er", args.noise, n_train=args.pairs, n_val=1, params=params), work)
    dataset = {"base": "er", "noise": args.noise, "n_train": args.pairs, "n_val": 1, "params": params}
    rows = []
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        spec = RunSpec(dataset=dataset, model=model, batch_size=args.pairs)
        canonical = spec.dataset_spec().canonical()
        after = estimate(canonical, spec.batch_size, None, spec.model_bytes(), spec.node_bytes())
        before = old_estimate(spec, args.n)
        code = CHILD.format(root=str(ROOT), folder=str(ds.path), model=model, steps=args.steps, pairs=args.pairs)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0:
            print(f"{model}: the step failed:\n{out.stderr[-2000:]}")
            continue
        measured = json.loads(out.stdout.strip().splitlines()[-1])
        peak = measured["peak"]
        assert after is not None and after.batch_bytes is not None
        rows.append((model, peak, before, after.batch_bytes))
        print(f"  {model}: peak {gb(peak)} GB, {gb(measured['before_step'])} GB before its first step", flush=True)
    print()
    print(f"{'model':10s} {'peak GB':>8s} {'before GB':>10s} {'peak/before':>12s} {'after GB':>9s} {'peak/after':>11s}")
    for model, peak, before, after in rows:
        ratios = f"{peak / before:12.1f} {gb(after):>9s} {peak / after:11.2f}"
        print(f"{model:10s} {gb(peak):>8s} {gb(before):>10s} {ratios}")
    short = [m for m, peak, _, after in rows if peak > after]
    print(f"\nestimate short of the measured peak (after): {', '.join(short) or 'none'}")
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(f"children's largest peak (ru_maxrss): {gb(largest)} GB")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
