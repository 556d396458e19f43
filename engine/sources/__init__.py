"""Base graph sources, selected by registry name: synthetic, real (PyG / OGB loaders) and the user's own."""

from engine.sources import real, synthetic, user  # noqa: F401  (importing them registers their sources)
from engine.sources.base import (
    NOISE_MODELS,
    SOURCES,
    BaseSplits,
    Source,
    data_root,
    params_dict,
    parse_param_args,
    parse_params,
    register_source,
)

__all__ = [
    "NOISE_MODELS",
    "SOURCES",
    "BaseSplits",
    "Source",
    "data_root",
    "params_dict",
    "parse_param_args",
    "parse_params",
    "register_source",
]
