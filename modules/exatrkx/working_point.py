"""The pipeline's working point (radius, cuts ...) as parameters of its Triton repository entries.

Thresholds belong to the trained models, so they live next to them: in the ``parameters`` of the
python models' ``config.pbtxt`` (``exatrkx_graph_building``: radius, k_max; ``exatrkx_edge_selection``:
cut; ``exatrkx_labeling``: cut, min_hits). The ensemble's python models read them from the config
Triton passes them; the per-stage producers read the same entries through the inference client,
so both ways run the same working point. A module parameter, when set, overrides it per job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from ...framework import InferenceError


#: parameters each stage's repository entry must declare, with their types
DECLARED: dict[str, dict[str, type]] = {
    "graph_building": {"radius": float, "k_max": int},
    "edge_selection": {"cut": float},
    "labeling": {"cut": float, "min_hits": int},
}


def config_parameters(config: Any) -> dict[str, str]:
    """``{name: string value}`` from a ``ModelConfig`` protobuf, the JSON dict Triton gives a python model,
    or parameters already in that form (``ModelInfo.parameters``)."""
    if isinstance(config, Mapping) and all(isinstance(value, str) for value in config.values()):
        return dict(config)
    if isinstance(config, Mapping):
        return {name: value["string_value"] for name, value in config.get("parameters", {}).items()}
    return {name: value.string_value for name, value in config.parameters.items()}


def read(stage: str, model: str, config: Any, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The typed working point of ``stage`` from model ``model``'s config, with non-None ``overrides`` applied.

    Raises:
        InferenceError: a parameter missing from the config or not of its type, naming model and key.
    """
    given = config_parameters(config)
    values: dict[str, Any] = {}
    for name, kind in DECLARED[stage].items():
        if overrides and overrides.get(name) is not None:
            values[name] = kind(overrides[name])
            continue
        if name not in given:
            raise InferenceError(f"model {model!r}: config.pbtxt has no parameter {name!r} (the {stage} working "
                                 f"point needs {sorted(DECLARED[stage])})")
        try:
            values[name] = kind(given[name])
        except ValueError:
            raise InferenceError(f"model {model!r}: parameter {name!r} = {given[name]!r} is not a "
                                 f"{kind.__name__}") from None
    return values
