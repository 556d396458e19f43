"""GAPE benchmark: positional encodings per 10,000 molecules, embedding time, downstream training throughput.

Run from the repository root::

    python benchmarks/bench_gape.py                   # 10,000 ringmol molecules (20 atoms each), one thread
    python benchmarks/bench_gape.py --molecules 2000 --steps 5

Setting: ``ringmol`` molecules (synthetic, no download), torch pinned to ``--threads`` (default 1), CPU.

- **PE**: ``laplacian_pe`` (k = 8, PyG ``AddLaplacianEigenvectorPE`` per molecule), ``random_walk_pe`` (20 steps,
  PyG ``AddRandomWalkPE``) and the GAPE embedding (``FrozenEmbedder.embed``: a GatedGCN, d = 32, 60k parameters,
  Table F.7's pretraining model, untrained: the cost does not depend on the weights) -> seconds per 10,000
  molecules;
- **downstream**: training steps of the Table F.6 AQSOL transformer (12 layers, 8 heads, ~195k parameters,
  batch 512) with an 8-dimensional PE after one warm-up step -> molecules/s.

Best of ``--repeats`` for every figure, in **CPU seconds** of this (single-threaded) process
(``time.process_time()``), so that a busy shared machine does not inflate them; wall-clock seconds are printed
beside them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def best(fn, repeats: int) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of the fastest of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        times.append((time.process_time() - c0, time.perf_counter() - t0))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="downstream training steps timed")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from engine import models
    from engine.gape.data import MoleculeSpec, build_molecules
    from engine.gape.embed import FrozenEmbedder
    from engine.gape.pe import Encoding, laplacian_pe, random_walk_pe
    from engine.gape.train import MoleculeTensors
    from engine.gape.transformer import build_transformer
    from engine.loop import make_optimiser

    print(f"load average at start: {os.getloadavg()}; torch threads {args.threads}")
    with tempfile.TemporaryDirectory() as tmp:
        data, _ = build_molecules(MoleculeSpec("ringmol", {"count": args.molecules}), Path(tmp))
    scale = 10_000 / args.molecules
    print(f"{args.molecules} molecules, {int(data.num_nodes.sum())} atoms")
    lap = best(lambda: laplacian_pe(data, 8, 0), args.repeats)
    rw = best(lambda: random_walk_pe(data, 20), args.repeats)
    torch.manual_seed(0)
    model = models.build("gatedgcn", out_dim=32, budget=60_000, in_dim=2).eval().requires_grad_(False)
    frozen = FrozenEmbedder("bench", Path("."), model, "degree", 32, torch.device("cpu"))
    ei, ptr = data.arrays["edge_index"], data.arrays["edge_ptr"]
    gape = best(lambda: frozen.embed(data.num_nodes, ei, ptr), args.repeats)
    print("\nPE computation per 10,000 molecules: CPU seconds (wall seconds)")
    for name, (cpu, wall) in (("lap (k=8)", lap), ("rwpe (20 steps)", rw), ("gape (gatedgcn d=32, embed)", gape)):
        print(f"  {name:<30} {cpu * scale:8.2f} s ({wall * scale:.2f} s)")

    enc = Encoding(random_walk_pe(data, 8))
    net = build_transformer(
        budget=195_218, num_atom_types=data.num_atom_types, pe_dim=8, layers=12, heads=8, dropout=0.1
    )
    tensors = MoleculeTensors(data, enc, torch.device("cpu"), 0.0, 1.0)
    opt, sched = make_optimiser(net, 5e-4, 1e-4, args.steps + 4, 2)
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        batch = tensors.gather(torch.randint(0, args.molecules, (512,), generator=gen))
        loss = torch.nn.functional.l1_loss(net(batch.atoms, batch.pe, batch.mask), batch.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()

    step()  # warm-up
    cpu, wall = best(lambda: [step() for _ in range(args.steps)], 1)
    print(f"\ndownstream training (Table F.6 AQSOL transformer, {net.num_parameters:,} parameters, batch 512)")
    print(f"  {512 * args.steps / cpu:8.0f} molecules per CPU second ({512 * args.steps / wall:.0f} per wall second)")
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
