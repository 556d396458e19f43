"""Base graph sources, selected by registry name: synthetic, real (PyG / OGB loaders) and the user's own."""

# Importing the source modules registers them; synthetic first so listings start with what needs no download.
from engine.sources import synthetic  # noqa: F401

# isort: split
from engine.sources import molecules, pairs, real, user  # noqa: F401

# isort: split
from engine.sources import connectome, packaged_molecules  # noqa: F401
from engine.sources.base import (
    SOURCES,
    BaseSplits,
    MoleculeSet,
    MoleculeSource,
    Source,
    check_source_files,
    check_sources_files,
    data_root,
    params_dict,
    parse_param_args,
    parse_params,
    register_source,
)

__all__ = [
    "SOURCES",
    "BaseSplits",
    "MoleculeSet",
    "MoleculeSource",
    "Source",
    "check_source_files",
    "check_sources_files",
    "data_root",
    "params_dict",
    "parse_param_args",
    "parse_params",
    "register_source",
]
