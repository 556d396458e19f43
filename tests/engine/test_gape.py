"""GAPE: molecule sources, alignment embeddings as positional encodings, the downstream transformer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.alignment.datasets import DatasetSpec, build_dataset
from engine.errors import GaptuiError
from engine.gape.data import MoleculeSpec, build_molecules
from engine.gape.embed import load_frozen, resolve_run
from engine.gape.pe import EncodingOptions, encoding, parse_pe
from engine.gape.spec import GapeSpec
from engine.gape.train import run_gape
from engine.gape.transformer import MoleculeTransformer, build_transformer
from engine.graphs import Graph
from engine.sources import SOURCES, parse_params
from tests.support.cli import run_cli
from tests.support.sources import OFFICIAL_SPLIT, SMILES, write_aqsol, write_pcqm, write_zinc
from tests.support.tui import SIZE
from tests.support.waiting import wait_until

rdkit = pytest.importorskip("rdkit")


def molecules(name: str, root: Path, seed: int = 0, **params: object):
    cls = SOURCES.get(name)
    return cls(parse_params(cls, {k: str(v) for k, v in params.items()})).molecules(np.random.default_rng(seed), root)


# ---------------------------------------------------------------------------------------------------------------
# Molecule sources


CSV_ROWS = [
    ("CCO", "1.5"),  # line 2
    ("not-a-smiles", "2.0"),  # line 3: unparsable
    ("c1ccccc1O", "-0.25"),  # line 4
    ("CC(=O)N", "n/a"),  # line 5: target not a number
    ("", "3"),  # line 6: empty SMILES
    ("[Na+].[Cl-]", "0.5"),  # line 7: two ions, no bonds (kept)
    ("C1CC1", "4"),  # line 8
]


def write_csv(path: Path, rows=CSV_ROWS) -> Path:
    path.write_text("name,smiles,logS\n" + "".join(f"m{i},{s},{t}\n" for i, (s, t) in enumerate(rows)))
    return path


def test_molecules_csv_reads_heavy_atoms_types_targets_and_reports_bad_rows_once(tmp_path: Path) -> None:
    from rdkit import Chem

    path = write_csv(tmp_path / "mols.csv")
    mols = molecules("molecules", tmp_path, path=path, target="logS", val_fraction=0.2, test_fraction=0.2)
    assert mols.rows.tolist() == [0, 2, 5, 6] and mols.skipped == [1, 3, 4]
    assert mols.notes == [
        "molecules: skipped 3 of 7 records of mols.csv (2 unparsable SMILES, 1 with a non-numeric 'logS'): "
        "lines 3, 5, 6"
    ]
    phenol = mols.graphs[1]
    assert phenol.num_nodes == 7 and phenol.num_edges == 7  # heavy atoms only
    ref = Chem.MolFromSmiles("c1ccccc1O")
    assert phenol.node_types.tolist() == [a.GetAtomicNum() for a in ref.GetAtoms()]  # RDKit atom order
    assert [g.target for g in mols.graphs] == [1.5, -0.25, 0.5, 4.0]
    assert sorted(np.concatenate(list(mols.splits.values())).tolist()) == [0, 1, 2, 3]
    again = molecules("molecules", tmp_path, path=path, target="logS", val_fraction=0.2, test_fraction=0.2)
    assert all(np.array_equal(mols.splits[k], again.splits[k]) for k in mols.splits)


def test_molecules_sdf_with_a_broken_block_and_split_property(tmp_path: Path) -> None:
    from rdkit import Chem

    blocks = []
    records = [("CCO", "train"), ("CCN", "val"), ("c1ccccc1", "test"), ("CC", "train"), ("CCC", "Valid")]
    for i, (smiles, split) in enumerate(records):
        block = Chem.MolToMolBlock(Chem.MolFromSmiles(smiles))
        if i == 3:
            block = block.replace("V2000", "V9999")  # an unreadable molfile
        blocks.append(f"{block}>  <gap>\n{i + 0.5}\n\n>  <fold>\n{split}\n\n$$$$\n")
    path = tmp_path / "mols.sdf"
    path.write_text("".join(blocks))
    mols = molecules("molecules", tmp_path, path=path, target="gap", split="fold")
    assert mols.rows.tolist() == [0, 1, 2, 4] and mols.skipped == [3]
    first_line_of_record_4 = sum(b.count("\n") for b in blocks[:3]) + 1
    assert mols.notes == [
        f"molecules: skipped 1 of 5 records of mols.sdf (1 unparsable molecule blocks): lines {first_line_of_record_4}"
    ]
    assert [g.target for g in mols.graphs] == [0.5, 1.5, 2.5, 4.5]
    assert {k: v.tolist() for k, v in mols.splits.items()} == {"train": [0], "val": [1, 3], "test": [2]}
    assert mols.official and mols.graphs[2].node_types.tolist() == [6] * 6


def test_molecules_errors_name_the_culprit(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "mols.csv")
    with pytest.raises(GaptuiError, match=r"--param target=solubility: .*mols\.csv has no column 'solubility'"):
        molecules("molecules", tmp_path, path=path, target="solubility")
    with pytest.raises(GaptuiError, match=r"molecules: .*nothing\.csv does not exist"):
        molecules("molecules", tmp_path, path=tmp_path / "nothing.csv")
    with pytest.raises(GaptuiError, match="neither a .csv nor an .sdf"):
        (tmp_path / "x.txt").write_text("smiles\nCC\n")
        molecules("molecules", tmp_path, path=tmp_path / "x.txt")


def test_molecules_are_an_alignment_base(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "mols.csv", [("CCO", "1"), ("c1ccccc1", "2"), ("CCCC", "3")] * 10)
    spec = DatasetSpec("molecules", 0.15, params={"path": str(path)}, seed=1)
    dataset, built = build_dataset(spec, tmp_path / "datasets")
    assert built and dataset.spec["noise_model"] == "add"
    # The test molecules (10%) stay out of pretraining.
    assert (len(dataset.split("train")), len(dataset.split("val"))) == (24, 3)


def test_pyg_and_pcqm_molecule_views_offline(tmp_path: Path, no_network: list[str]) -> None:
    write_aqsol(tmp_path)
    write_zinc(tmp_path)
    aq = molecules("aqsol", tmp_path)
    assert aq.official and set(aq.splits) == {"train", "val", "test"}
    assert all(g.node_types.shape == (g.num_nodes,) and g.target == 0.5 for g in aq.graphs)
    zinc = molecules("zinc", tmp_path)
    assert [len(zinc.splits[s]) for s in ("train", "val", "test")] == [2, 1, 1]
    assert zinc.graphs[0].target == pytest.approx(0.1)
    write_pcqm(tmp_path, SMILES, OFFICIAL_SPLIT)
    pcqm = molecules("pcqm4mv2", tmp_path)
    # Every train / valid molecule (the fixture is smaller than the 20,000 / 2,000 subset), bond-less ones kept.
    assert [len(pcqm.splits[s]) for s in ("train", "val")] == [6, 3] and "test" not in pcqm.splits
    assert pcqm.graphs[1].node_types.tolist() == [6] * 6 and pcqm.graphs[1].target == 3.5
    assert pcqm.graphs[3].num_nodes == 1 and no_network == []


def test_molecule_dataset_cache_is_content_addressed(tmp_path: Path) -> None:
    spec = MoleculeSpec("ringmol", {"count": "40"}, seed=2)
    a, built_a = build_molecules(spec, tmp_path)
    b, built_b = build_molecules(MoleculeSpec("ringmol", {"count": 40}, seed=2), tmp_path)
    assert built_a and not built_b and a.id == b.id
    assert np.array_equal(a.arrays["edge_index"], b.arrays["edge_index"])
    assert build_molecules(MoleculeSpec("ringmol", {"count": 40}, seed=3), tmp_path)[0].id != a.id
    with pytest.raises(GaptuiError, match="dataset 'er' has no atom types or targets; molecule datasets: "):
        MoleculeSpec("er").canonical()


# ---------------------------------------------------------------------------------------------------------------
# Positional encodings


def test_pe_names() -> None:
    assert parse_pe("GAPE:abc123+rwpe").kind == "gape+rwpe" and parse_pe("gape:abc123+rwpe").run == "abc123"
    assert parse_pe("abs-lap").kind == "abs-lap"
    with pytest.raises(GaptuiError, match="expected one of none, lap"):
        parse_pe("gape")


def test_encodings_shapes_and_caching(tmp_path: Path) -> None:
    data, _ = build_molecules(MoleculeSpec("molecules", {"path": str(write_csv(tmp_path / "m.csv"))}), tmp_path)
    opts = EncodingOptions(lap_k=4, rwpe_steps=5)
    lap = encoding(data, parse_pe("lap"), tmp_path, opts)
    total = int(data.num_nodes.sum())
    assert lap.values.shape == (total, 4) and lap.flip == 0
    # Ethanol (3 atoms) has 2 non-trivial eigenvectors: the last two columns are zero.
    assert np.all(lap.values[:3, 2:] == 0) and np.all(np.abs(lap.values[:3, :2]).sum(axis=0) > 0)
    assert np.array_equal(encoding(data, parse_pe("abs-lap"), tmp_path, opts).values, np.abs(lap.values))
    assert encoding(data, parse_pe("r-lap"), tmp_path, opts).flip == 4
    rw = encoding(data, parse_pe("rwpe"), tmp_path, opts).values
    assert rw.shape == (total, 5) and np.allclose(rw[:3, 0], 0)  # no return after one step
    assert np.allclose(rw[:3, 1], [0.5, 1.0, 0.5])  # from the middle of C-C-O, two steps always return
    cached = sorted(p.name.split("-")[0] for p in (tmp_path / "pe" / data.id).iterdir())
    assert cached == ["lap", "rwpe"]  # abs-lap and r-lap reuse the lap part
    assert encoding(data, parse_pe("none"), tmp_path, opts).dim == 0


# ---------------------------------------------------------------------------------------------------------------
# The frozen alignment model (one tiny finished run shared by the tests below)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished alignment run on ringmol, trained by the real worker (2 epochs), in ``<ws>/runs/<id>``."""
    from engine.alignment.spec import RunSpec
    from engine.worker import main

    ws = tmp_path_factory.mktemp("ws")
    spec = RunSpec(
        dataset={"base": "ringmol", "noise": 0.15, "params": {"count": 200}},
        model="gin",
        epochs=2,
        budget=8000,
        out_dim=16,
        batch_size=50,
        device="cpu",
        datasets_dir=str(ws / "datasets"),
    )
    run_dir = ws / "runs" / spec.hash()[:12]
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps(spec.to_dict()))
    assert main(["--spec", str(run_dir / "spec.json"), "--out", str(run_dir), "--quiet"]) == 0
    return run_dir


def _by_hand(model: torch.nn.Module, graph: Graph) -> np.ndarray:
    from engine.alignment.training import node_features

    ei = torch.as_tensor(graph.edge_index())
    x = node_features("degree", ei, graph.num_nodes)
    with torch.no_grad():
        return model(x, ei, torch.zeros(graph.num_nodes, dtype=torch.long)).numpy()


def test_embeddings_are_permutation_equivariant(pretrained: Path) -> None:
    frozen = load_frozen(pretrained)
    rng = np.random.default_rng(0)
    mol = molecules("ringmol", Path("."), count=3).graphs[2]
    perm = rng.permutation(mol.num_nodes)  # new label of old node i is perm[i]
    relabelled = Graph(mol.num_nodes, np.sort(perm[mol.edges], axis=1))
    a, b = frozen.embed_graphs([mol, relabelled])[: mol.num_nodes], frozen.embed_graphs([relabelled])
    assert np.allclose(b[perm], a, atol=1e-5)
    assert not np.allclose(a, a[rng.permutation(mol.num_nodes)], atol=1e-3)  # the rows do differ


def test_the_frozen_model_is_rebuilt_with_every_option_of_its_run(pretrained: Path) -> None:
    from engine.alignment.spec import RunSpec

    spec = RunSpec.from_file(pretrained / "spec.json")
    model = load_frozen(pretrained).model
    # The default recipe's block has the parameters of the former one: built without the run's options, the
    # checkpoint would load into another function without an error.
    assert spec.recipe_label == "gaptui" and (spec.block, spec.input_layer) == ("act-norm", "gcn")
    assert (model.input_layer, model.norm, model.activation, model.block) == (
        spec.input_layer,
        spec.norm,
        spec.activation,
        spec.block,
    )


@pytest.mark.e2e
def test_gape_embed_cli_matches_the_model_by_hand(pretrained: Path, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "mols.csv")
    out = tmp_path / "pe.npz"
    ws = pretrained.parents[1]
    args = ["gape", "embed", pretrained.name[:8], "--dataset", "molecules", "-p", f"path={path}", "-p", "target=logS"]
    args += ["-w", str(ws)]
    proc = run_cli(*args, "--out", str(out), "--json", env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "skipped 3 of 7 records" in proc.stderr
    z = np.load(out)
    assert z["num_nodes"].tolist() == [3, 7, 2, 3] and z["skipped"].tolist() == [1, 3, 4]
    assert z["pe"].dtype == np.float32 and z["pe"].shape == (15, 16)
    assert str(z["run"]) == load_frozen(pretrained).run
    model = load_frozen(pretrained).model
    graphs = molecules("molecules", tmp_path, path=path, target="logS").graphs
    # Per-graph GraphNorm divides by a graph's spread: where nodes are alike (symmetric ends of a chain, atoms of a
    # molecule without bonds) it scales rounding noise up, so batched and lone embeddings differ by the CPU's
    # summation order there (up to 1e-3 on a chain, 1e-1 on a bond-less pair); molecules with bonds must agree.
    ptr = np.concatenate([[0], np.cumsum(z["num_nodes"])])
    for i, g in enumerate(graphs):
        got = z["pe"][ptr[i] : ptr[i + 1]]
        assert np.isfinite(got).all()
        if len(g.edges):
            assert np.allclose(got, _by_hand(model, g), atol=5e-3), i
    again = run_cli(*args, "--out", str(out), env={"OMP_NUM_THREADS": "1"})
    assert again.returncode == 2 and "error: --out" in again.stderr and "exists" in again.stderr
    with pytest.raises(GaptuiError, match="no run 'zzz' in "):
        resolve_run("zzz", ws / "runs")


# ---------------------------------------------------------------------------------------------------------------
# The downstream transformer


def test_padding_never_changes_a_prediction() -> None:
    torch.manual_seed(0)
    model = MoleculeTransformer(width=16, num_atom_types=5, pe_dim=3, layers=2, heads=4, dropout=0.1).eval()
    atoms = torch.tensor([[1, 2, 3]])
    pe = torch.randn(1, 3, 3)
    alone = model(atoms, pe, torch.ones(1, 3, dtype=torch.bool))
    # The same molecule padded with 5 atoms of garbage (types and encodings), next to a longer molecule.
    padded_atoms = torch.tensor([[1, 2, 3, 4, 4, 0, 1, 2], [0, 1, 2, 3, 4, 0, 1, 2]])
    padded_pe = torch.cat([torch.cat([pe, 100 * torch.randn(1, 5, 3)], 1), torch.randn(1, 8, 3)])
    mask = torch.tensor([[True] * 3 + [False] * 5, [True] * 8])
    with torch.no_grad():
        batched = model(padded_atoms, padded_pe, mask)
        other = model(padded_atoms[1:], padded_pe[1:], mask[1:])
    assert torch.allclose(batched[0], alone[0], atol=1e-5)
    assert torch.allclose(batched[1], other[0], atol=1e-5)


def test_transformer_meets_the_table_f6_budget() -> None:
    model = build_transformer(budget=195_218, num_atom_types=65, pe_dim=8, layers=12, heads=8, dropout=0.1)
    assert abs(model.num_parameters - 195_218) <= 0.01 * 195_218 and model.width % 8 == 0
    assert len(model.encoder.layers) == 12 and model.encoder.layers[0].self_attn.batch_first


# ---------------------------------------------------------------------------------------------------------------
# The training loop


def test_downstream_loop_streams_events(tmp_path: Path) -> None:
    events: list[tuple[str, dict]] = []
    spec = GapeSpec(
        dataset={"base": "ringmol", "params": {"count": 60}},
        pe="rwpe",
        layers=1,
        heads=2,
        budget=3000,
        epochs=2,
        batch_size=16,
        device="cpu",
        datasets_dir=str(tmp_path),
    )
    (tmp_path / "run").mkdir()
    result = run_gape(spec, tmp_path / "run", lambda name, **f: events.append((name, f)))
    assert events[0] == ("progress", {"phase": "preparing", "what": "reading the molecules and their PE rwpe"})
    events = [(k, f) for k, f in events if k != "progress"]
    kinds = [k for k, _ in events]
    assert kinds == ["start", "eval", "epoch", "eval", "epoch"]  # "done" is the worker's
    assert events[0][1]["model"] == "transformer" and events[0][1]["pe"] == "rwpe"
    assert {"val_mae", "test_mae", "train_loss"} <= set(events[1][1])
    assert result["status"] == "done" and math.isfinite(result["metrics"]["val_mae"])
    # Resuming a finished run trains nothing more and reports the same metrics.
    again: list[tuple[str, dict]] = []
    assert run_gape(spec, tmp_path / "run", lambda name, **f: again.append((name, f)))["metrics"] == result["metrics"]
    again = [(k, f) for k, f in again if k != "progress"]
    assert [k for k, _ in again] == ["start"] and again[0][1]["resumed_from"] == {"epoch": 2, "batch": 0, "step": 6}


# ---------------------------------------------------------------------------------------------------------------
# Science on a CPU: rings counted from structure alone


@pytest.mark.slow
def test_rings_are_counted_with_rwpe_and_gape_but_not_without_a_pe(pretrained: Path, tmp_path: Path) -> None:
    """ringmol: 20 carbons, 0-2 six-rings, target = rings. Without a PE the transformer sees 20 identical tokens and
    can only predict a constant; RWPE and GAPE see the rings. Measured on seed 0 (300 molecules, 40 epochs, about
    45 s on a loaded 2-core machine): val MAE of the best constant 0.533, none 0.533, rwpe 0.092, gape 0.003."""
    common = {
        "dataset": {"base": "ringmol", "params": {"count": 300}},
        "layers": 2,
        "heads": 4,
        "budget": 20_000,
        "epochs": 40,
        "batch_size": 24,
        "lr": 3e-3,
        "dropout": 0.0,
        "warmup_steps": 20,
        "device": "cpu",
        "datasets_dir": str(tmp_path),
        "runs_dir": str(pretrained.parent),
    }
    maes = {}
    for pe in ("none", "rwpe", f"gape:{pretrained.name}"):
        run_dir = tmp_path / pe.replace(":", "-")
        run_dir.mkdir()
        maes[pe.split(":")[0]] = run_gape(GapeSpec(pe=pe, **common), run_dir, lambda *_a, **_k: None)["metrics"][
            "val_mae"
        ]
    data, _ = build_molecules(MoleculeSpec("ringmol", {"count": 300}), tmp_path)
    y = data.arrays["target"]
    constant = float(np.abs(y[data.split("val")] - np.median(y[data.split("train")])).mean())
    assert maes["none"] >= 0.9 * constant
    assert maes["rwpe"] <= 0.3 * constant
    assert maes["gape"] <= 0.3 * constant


def test_spec_identity_and_steps() -> None:
    base = {"dataset": {"base": "ringmol"}, "device": "cpu"}
    none = GapeSpec.from_dict({**base, "pe": "none", "lap_k": 4})
    assert none.hash() == GapeSpec.from_dict({**base, "pe": "none", "lap_k": 8}).hash()  # lap_k unused by none
    assert none.hash() == none.replace(device="cuda", datasets_dir="/elsewhere").hash()  # placement is not identity
    assert (
        GapeSpec.from_dict({**base, "pe": "lap", "lap_k": 4}).hash() != GapeSpec.from_dict({**base, "pe": "lap"}).hash()
    )
    # Table F.6 counts steps: 10,000 steps of batch 512 over AQSOL's 7,831 training molecules are 625 epochs.
    assert GapeSpec.from_dict({**base, "steps": 10_000, "batch_size": 512}).epochs_for(7831) == 625
    with pytest.raises(GaptuiError, match="gape spec: unknown key 'pes'"):
        GapeSpec.from_dict({**base, "pes": "lap"})
    with pytest.raises(GaptuiError, match="positional encoding 'lapx'"):
        GapeSpec.from_dict({**base, "pe": "lapx"})


# ---------------------------------------------------------------------------------------------------------------
# The gape task family: presets, dependencies, Table 1


def test_gape_preset_expresses_the_whole_chain() -> None:
    from engine.alignment.spec import RunSpec
    from engine.tasks import Placement, family
    from gaptui.presets import load_preset

    preset = load_preset("gape")
    fam = family("gape")
    specs = fam.grid(preset, Placement("d", "r"))
    assert len(specs) == preset.size == 3 + 3 * 7 * 4
    pretraining = specs[:3]
    assert all(isinstance(s, RunSpec) for s in pretraining)  # dependencies come first
    # Table F.7: AQSOL GatedGCN eta 15%, ZINC GatedGCN eta 30%, PCQM4Mv2 GAT eta 30%, all d = 32.
    got = [(s.dataset["base"], s.model, s.dataset["noise"], s.out_dim) for s in pretraining]
    assert got == [("aqsol", "gatedgcn", 0.15, 32), ("zinc", "gatedgcn", 0.3, 32), ("pcqm4mv2", "gat", 0.3, 32)]
    downstream = [s for s in specs[3:] if isinstance(s, GapeSpec)]
    assert len(downstream) == 84 and {s.seed for s in downstream} == {0, 1, 2, 3}
    by_base = {s.dataset["base"]: s for s in downstream if s.pe == "none"}
    assert (by_base["aqsol"].budget, by_base["aqsol"].heads, by_base["aqsol"].lr) == (195_218, 8, 5e-4)
    assert (by_base["pcqm4mv2"].heads, by_base["pcqm4mv2"].batch_size, by_base["pcqm4mv2"].dropout) == (16, 1024, 0.0)
    gape = [s for s in downstream if s.pe_spec().run]
    assert len(gape) == 3 * 2 * 4
    for s in gape:
        (dep,) = fam.dependencies(s)
        assert dep == next(p.hash() for p in pretraining if p.dataset["base"] == s.dataset["base"])
    assert {fam.record_axes(s)["pe"] for s in downstream} == {
        "none",
        "lap",
        "abs-lap",
        "r-lap",
        "rwpe",
        "gape",
        "gape+rwpe",
    }


def test_table_one_is_the_mean_over_seeds_lowest_best() -> None:
    from gaptui.analysis import build_tables

    def record(pe: str, seed: int, mae: float) -> dict:
        axes = {"dataset": "aqsol", "pe": pe}
        return {"task": "gape", "status": "done", "axes": axes, "seed": seed, "metrics": {"val_mae": mae}}

    maes = {"none": [1.7, 1.8, 1.6, 2.5], "rwpe": [1.12, 1.11, 1.13, 1.12], "gape": [1.09, 1.08, 1.10, 1.09]}
    records = [record(pe, s, v) for pe, values in maes.items() for s, v in enumerate(values)]
    (table,) = build_tables(records, task="gape")
    assert table.rows == ("none", "rwpe", "gape")  # Table 1's row order
    none = table.cell("none", "aqsol")
    assert none.median == pytest.approx(1.9)  # the mean (the median would be 1.75)
    assert table.cell("gape", "aqsol").mark == "best" and table.cell("rwpe", "aqsol").mark == "within3"
    assert table.cell_dict(none)["mean"] == pytest.approx(1.9) and "median" not in table.cell_dict(none)


@pytest.mark.e2e
@pytest.mark.slow
def test_gape_smoke_preset_end_to_end_then_table(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    env = {"OMP_NUM_THREADS": "1"}
    res = run_cli(
        "run", "--preset", "gape-smoke", "-w", str(ws), "--cpu-jobs", "1", "--gpus", "none", env=env, timeout=900
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    table = run_cli("table", "--task", "gape", "--format", "json", "-w", str(ws), env=env)
    assert table.returncode == 0, table.stderr
    (doc,) = json.loads(table.stdout)
    cells = doc["cells"]
    assert sorted(c["pe"] for c in cells) == sorted(["none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe"])
    assert all(c["runs"] == 1 and c["dataset"] == "ringmol[count=300]" and c["mean"] > 0 for c in cells)
    assert sum(c["mark"] == "best" for c in cells) == 1
    again = run_cli("run", "--preset", "gape-smoke", "-w", str(ws), "--cpu-jobs", "1", "--gpus", "none", env=env)
    assert again.returncode == 0 and "8 runs, 8 already done" in again.stderr  # nothing is redone


@pytest.mark.asyncio
async def test_ranking_screen_shows_table_one(tmp_path: Path) -> None:
    from textual.widgets import Static

    from engine.tasks import Placement, family
    from gaptui.history.store import History
    from gaptui.presets import load_preset
    from gaptui.scheduler import new_record
    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.ranking import RankingScreen
    from gaptui.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    fam = family("gape")
    specs = fam.grid(load_preset("gape-smoke"), Placement(str(ws.datasets), str(ws.raw_data)))
    maes = {"none": 0.7, "lap": 0.6, "abs-lap": 0.5, "r-lap": 0.55, "rwpe": 0.2, "gape": 0.1, "gape+rwpe": 0.101}
    records = []
    for i, spec in enumerate(s for s in specs if isinstance(s, GapeSpec)):
        record = new_record(spec, ws, preset="gape-smoke", planned_seeds=1)
        mae = maes[spec.pe_spec().kind]
        record.update(status="done", finished=f"2025-01-02T10:{i:02d}:00+0000", metrics={"val_mae": mae})
        records.append(record)
    with History(ws, write=True) as history:
        history.put_many(records)
    app = GaptuiApp(ws)
    async with app.run_test(size=SIZE) as pilot:
        app.switch_mode("ranking")
        await wait_until(pilot, lambda: isinstance(app.screen, RankingScreen), what="ranking")
        ranking = app.screen
        await pilot.pause()
        if ranking.table is None or ranking.table.task != "gape":
            await pilot.press("t")  # the next family with runs
        await wait_until(pilot, lambda: ranking.table is not None and ranking.table.task == "gape", what="gape")
        table = ranking.table
        assert table.rows == ("none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe")
        assert table.columns == ("ringmol[count=300]",)
        assert [c.row for c in table.best("ringmol[count=300]")] == ["gape"]
        assert table.cell("gape+rwpe", "ringmol[count=300]").mark == "within1"
        title = str(ranking.query_one("#ranking-title", Static).render())
        assert title.startswith("gape — val MAE, mean ± std over seeds; lower is better")


# issue 19, real molecules

#: (SMILES, split): tiny molecules, single atoms, salts, charges, stereo, aromatic rings, small rings that are
#: complete graphs (triangles, tetrahedrane K4) or nearly so (bicyclobutane: K4 minus an edge).
REAL = [
    ("O", "train"),  # water: one heavy atom
    ("CC", "train"),  # two atoms, one bond: a complete graph
    ("C#C", "train"),
    ("[Na+]", "train"),
    ("C", "train"),
    ("[Na+].[Cl-]", "train"),  # a salt: two ions, no bond
    ("CC(=O)[O-].[Na+]", "train"),  # a salt with a bonded anion and an isolated cation
    ("C[C@H](N)C(=O)O", "train"),  # alanine, a stereo centre
    ("F/C=C/F", "train"),  # double-bond stereo
    ("c1ccccc1", "train"),
    ("c1ccncc1", "train"),
    ("C1CC1", "train"),  # triangle
    ("C1=CC1", "train"),  # cyclopropene: a triangle too
    ("C12C3C1C23", "train"),  # tetrahedrane: K4
    ("C1C2C1C2", "train"),  # bicyclobutane: 5 bonds, 1 non-edge; 0.3 * 5 > 1, so capped
    ("C[N+](C)(C)C", "train"),  # tetramethylammonium
    ("[NH4+]", "train"),
    ("O=C=O", "train"),  # 2 bonds, 1 non-edge: 0.3 * 2 <= 1, not capped
    ("CCO", "val"),
    ("C1CC1", "val"),
    ("[K+]", "val"),
]


def _real_csv(path: Path) -> Path:
    path.write_text("smiles,split\n" + "".join(f"{s},{split}\n" for s, split in REAL))
    return path


def _shape(smiles: str) -> tuple[int, set[tuple[int, int]]]:
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    return mol.GetNumAtoms(), {tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in mol.GetBonds()}


@pytest.mark.parametrize("model", ["add", "add_remove"])
def test_real_molecules_make_a_dataset_with_capped_and_left_out_graphs_counted(tmp_path: Path, model: str) -> None:
    eta = 0.3
    path = _real_csv(tmp_path / "real.csv")
    spec = DatasetSpec("molecules", eta, model, params={"path": str(path), "split": "split"}, seed=4)
    dataset, built = build_dataset(spec, tmp_path / "datasets")
    assert built
    for split in ("train", "val"):
        shapes = [_shape(s) for s, sp in REAL if sp == split]
        kept = [(n, e) for n, e in shapes if n >= 2 and e]
        capped = [eta * len(e) > n * (n - 1) // 2 - len(e) for n, e in kept]
        stats = dataset.stats[split]
        assert (stats["pairs"], stats["left_out"], stats["capped_graphs"]) == (
            len(kept),
            len(shapes) - len(kept),
            sum(capped),
        )
        pairs = dataset.split(split)
        added = removed = 0
        for p, ((n, base), cap) in enumerate(zip(kept, capped, strict=True)):
            num, g_index, h_index, perm = pairs.pair(p)
            assert num == n and {(int(u), int(v)) for u, v in g_index.T if u < v} == base
            inverse = np.argsort(perm)
            noised = {(int(a), int(b)) for a, b in inverse[h_index].T if a < b}
            added += len(noised - base)
            removed += len(base - noised)
            if cap:  # p_add = 1: every non-edge is added (a complete graph has none)
                complete = {(u, v) for u in range(n) for v in range(u + 1, n)}
                assert complete - base <= noised
            if model == "add":
                assert base <= noised
        edges = sum(len(e) for _, e in kept)
        assert (stats["added_edges"], stats["removed_edges"], stats["edges"]) == (added, removed, edges)
        assert stats["added_fraction"] == pytest.approx(added / edges)
        assert stats["removed_fraction"] == pytest.approx(removed / edges)
    assert dataset.stats["train"]["capped_graphs"] == 6  # CC, C#C, C1CC1, C1=CC1, tetrahedrane, bicyclobutane


@pytest.mark.e2e
def test_real_molecules_build_and_show_their_counts_on_the_command_line(tmp_path: Path) -> None:
    path = _real_csv(tmp_path / "real.csv")
    args = ["molecules", "-p", f"path={path}", "-p", "split=split", "--noise", "0.3", "-w", str(tmp_path / "ws")]
    built = run_cli("datasets", "build", *args)
    assert built.returncode == 0, built.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2:4] for line in built.stdout.splitlines() if "│" in line}
    assert [c.strip() for c in rows["p_add capped at 1"]] == ["6", "1"]
    assert [c.strip() for c in rows["left out (no edges)"]] == ["5", "1"]
    ident = built.stdout.split("dataset ")[-1].split()[0]
    shown = run_cli("datasets", "stats", ident, "-w", str(tmp_path / "ws"), "--json")
    stats = json.loads(shown.stdout)["stats"]
    assert (stats["train"]["pairs"], stats["train"]["left_out"], stats["val"]["capped_graphs"]) == (13, 5, 1)


def test_molecules_without_bonds_only_are_refused_before_any_file(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "atoms.csv", [("C", "1"), ("[Na+].[Cl-]", "2"), ("O", "3")] * 4)
    with pytest.raises(GaptuiError, match=r"has no training pair: all \d+ training graphs have fewer than 2 nodes"):
        build_dataset(DatasetSpec("molecules", 0.1, params={"path": str(path)}), tmp_path / "datasets")
    assert not (tmp_path / "datasets").exists()
    # Bonds in training molecules only: the validation split would be empty, so no run could have a metric.
    rows = [("CCO", "1", "train"), ("[Na+]", "2", "val")]
    path.write_text("smiles,logS,split\n" + "".join(f"{s},{t},{sp}\n" for s, t, sp in rows))
    with pytest.raises(GaptuiError, match=r"has no validation pair: all 1 validation graphs"):
        build_dataset(DatasetSpec("molecules", 0.1, params={"path": str(path), "split": "split"}), tmp_path / "d")


def test_gape_embeddings_cover_every_molecule_even_those_left_out_of_alignment(
    pretrained: Path, tmp_path: Path
) -> None:
    from engine.gape.embed import embed_source

    path = _real_csv(tmp_path / "real.csv")
    params = {"path": str(path), "split": "split"}
    out = embed_source(load_frozen(pretrained), "molecules", params, seed=0, datasets_dir=tmp_path, raw_root=None)
    sizes = [_shape(s)[0] for s, _ in REAL]
    assert out.num_nodes.tolist() == sizes and out.skipped.tolist() == []  # every molecule, in source order
    assert out.pe.shape == (sum(sizes), 16) and np.isfinite(out.pe).all()
    graphs = molecules("molecules", tmp_path, **params).graphs
    model = load_frozen(pretrained).model
    start = np.concatenate([[0], np.cumsum(sizes)])
    for i, graph in enumerate(graphs):
        if graph.num_edges:
            # Rows of molecules with bonds are the model's output on that molecule alone, up to float noise that
            # per-graph normalisation amplifies where nodes are alike (about 1e-3 here: the test is of order and
            # coverage). Bond-less molecules have every node alike: their rows are that noise, left unchecked.
            assert np.allclose(out.pe[start[i] : start[i + 1]], _by_hand(model, graph), atol=5e-3), REAL[i]
