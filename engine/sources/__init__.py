"""Base graph sources, selected by registry name: synthetic, real (PyG / OGB loaders) and the user's own."""

from engine.sources import synthetic  # noqa: F401  (registers the synthetic sources)
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
