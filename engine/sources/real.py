"""Real base graphs: molecules (AQSOL, ZINC, PCQM4Mv2) and BFS samples of large networks (CoraFull, ogbn-arxiv).

Only structure is kept: node and edge features, targets and labels are dropped. Each dataset lives in its own
folder ``<data root>/<source name>/``, which is the folder handed to the PyG / OGB loader as its ``root``.

Raw files that are missing are downloaded (PyG does it for AQSOL, ZINC and CoraFull; this module for the OGB
files) unless ``GAPTUI_OFFLINE=1``; when they are missing and cannot be fetched the loader raises one
:class:`GaptuiError` line naming the files to place and the folder to place them in. Every socket operation of a
download is bounded by :data:`DOWNLOAD_TIMEOUT_S`, so a machine without network fails fast instead of hanging.

torch_geometric, rdkit and the OGB files are touched only inside :meth:`Source.load`, so importing this module
(and with it the registry) stays cheap.

One module per kind of loader, imported here in the order the registry lists them: :mod:`engine.sources.pyg_molecules`
(AQSOL, ZINC), :mod:`engine.sources.pcqm` (PCQM4Mv2), :mod:`engine.sources.large_graphs` (CoraFull, ogbn-arxiv); the
downloads, offline checks and PyG folder handling they share are :mod:`engine.sources.fetch`.
"""

from __future__ import annotations

from engine.sources.fetch import (
    DOWNLOAD_TIMEOUT_S,
    NETWORK_ERRORS,
    check_download_allowed,
    download_zip,
    fetch_raw,
    first_items,
    missing_error,
    missing_files,
    offline,
    open_pyg,
    pick,
    pyg_item,
    socket_timeout,
)
from engine.sources.pyg_molecules import AQSOL_FILES, ZINC_FILES, AqSol, Zinc, ZincParams, pyg_molecules

# isort: split
from engine.sources.pcqm import (
    PCQM4MV2_URL,
    Pcqm4mV2,
    atomic_numbers,
    load_split_dict,
    mol_item,
    rdkit_chem,
    read_columns,
    read_smiles,
    sample_molecules,
    smiles_item,
)

# isort: split
from engine.sources.large_graphs import (
    OGBN_ARXIV_FILES,
    OGBN_ARXIV_URL,
    BfsParams,
    CoraFullSource,
    OgbnArxiv,
    read_int_csv_gz,
)

__all__ = [
    "AQSOL_FILES",
    "DOWNLOAD_TIMEOUT_S",
    "NETWORK_ERRORS",
    "OGBN_ARXIV_FILES",
    "OGBN_ARXIV_URL",
    "PCQM4MV2_URL",
    "ZINC_FILES",
    "AqSol",
    "BfsParams",
    "CoraFullSource",
    "OgbnArxiv",
    "Pcqm4mV2",
    "Zinc",
    "ZincParams",
    "atomic_numbers",
    "check_download_allowed",
    "download_zip",
    "fetch_raw",
    "first_items",
    "load_split_dict",
    "missing_error",
    "missing_files",
    "mol_item",
    "offline",
    "open_pyg",
    "pick",
    "pyg_item",
    "pyg_molecules",
    "rdkit_chem",
    "read_columns",
    "read_int_csv_gz",
    "read_smiles",
    "sample_molecules",
    "smiles_item",
    "socket_timeout",
]
