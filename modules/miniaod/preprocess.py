"""A model's ``preprocess.json``: how CMS turns a jet's named features into the model's input arrays.

CMS defines every ParticleNet-family tagger version by a ``preprocess.json`` beside the model (cms-data
RecoBTag-Combined): the model's inputs in order (``input_names``), for each input the named features that
make its rows (``var_names``), how each is transformed (``median``, ``norm_factor``, ``replace_inf_value``,
``lower_bound``, ``upper_bound``, ``pad``) and how long it is (``min_length``/``max_length``, or one fixed
``var_length``), and the names of the model's outputs (``output_names``). Reading the file, not typing its
values into code, is what lets a new tagger version plug in by configuration.

Every form CMS's files use is read, as CMSSW's parser (``ParticleNetConstructor``) reads them: ``var_length``
wins over ``min_length``/``max_length``; ``pad`` may be left out (0); numbers may be integers; keys it does
not read (the older files' per-input ``input_shape``) are ignored. CMSSW takes the output names from its
configuration, not from the file, so their forms vary: ``output_names`` is a list, or a mapping from each
name to the training's definition of it (the regression versions), or absent with the older files'
``flav_names``; here they are the names of last resort (after ``classes`` and the model's labels file).

The transformation is CMSSW's ``center_norm_pad``: a value that is not finite or beyond ±1e32 becomes
``replace_inf_value``; then ``clip((x - median) * norm_factor, lower_bound, upper_bound)``; positions past a
jet's entries hold ``pad``. As CMS's SONIC producer does for the jets of an event, every jet of a batch of
events is padded to the batch's longest list (clamped to ``[min_length, max_length]``; the longest lists are
truncated, keeping the first entries), so one rectangular request carries all the batch's jets.

Example::

    spec = load_preprocess("cms-models/particlenet_AK4/preprocess.json")
    info = TagInfo.of_batch(settings, jets, pf, members, svs)
    inputs = build_inputs(spec, info.n_jets, info.entries, info.feature)   # {"pf_points": [jets, 2, N], ...}
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from ...framework import ConfigError, project_path

if TYPE_CHECKING:
    from ...framework.inference import TensorSpec


#: CMSSW's ``catch_infs`` limit: values beyond it count as infinite
INF_LIMIT = 1e32


@dataclass(frozen=True)
class VarInfo:
    """How one named feature is transformed (CMS's ``PreprocessParams::VarInfo``)."""

    median: float = 0.0
    norm_factor: float = 1.0
    replace_inf_value: float = 0.0
    lower_bound: float = -INF_LIMIT
    upper_bound: float = INF_LIMIT
    pad: float = 0.0


@dataclass(frozen=True)
class InputGroup:
    """One model input: the ``[jets, len(var_names), length]`` array its features make."""

    name: str
    var_names: tuple[str, ...]
    infos: tuple[VarInfo, ...]
    min_length: int
    max_length: int

    def length(self, counts: np.ndarray) -> int:
        """The padded length for entries-per-jet ``counts`` (every jet of the request): the longest, clamped
        to the bounds."""
        longest = int(counts.max()) if counts.size else 0
        return int(np.clip(longest, self.min_length, self.max_length))

    def lengths(self, counts: np.ndarray) -> np.ndarray:
        """Each jet's own padded length: its entries clamped to the bounds (a request of some of the jets is
        padded to the longest of theirs)."""
        return np.clip(counts, self.min_length, self.max_length)


@dataclass(frozen=True)
class Preprocess:
    """A whole ``preprocess.json``: the inputs in the model's order and the output names."""

    path: str
    inputs: tuple[InputGroup, ...]
    output_names: tuple[str, ...]

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Every named feature the inputs use, once, in order of first use."""
        return tuple(dict.fromkeys(name for group in self.inputs for name in group.var_names))


def load_preprocess(path: str | os.PathLike, key: str = "preprocess_json") -> Preprocess:
    """Reads and checks a ``preprocess.json``; a missing or malformed file is one :class:`ConfigError` naming
    the file and the entry to fix (``key`` is the configuration key that named the file)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{str(path)!r} does not exist (a model's preprocess.json)", key=key) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{str(path)!r} is not a readable JSON file: {err}", key=key) from None

    def fail(entry: str, reason: str) -> ConfigError:
        return ConfigError(f"{str(path)!r}: {entry}: {reason}", key=key)

    if not isinstance(data, dict) or not isinstance(data.get("input_names"), list) or not data["input_names"]:
        raise fail("input_names", "missing or empty (the model's inputs, in order)")
    groups = []
    for name in data["input_names"]:
        group = data.get(name)
        if not isinstance(group, dict):
            raise fail(str(name), "listed in input_names but not defined")
        var_names = group.get("var_names")
        if not isinstance(var_names, list) or not var_names or not all(isinstance(v, str) for v in var_names):
            raise fail(f"{name}.var_names", "missing or not a list of feature names")
        try:
            if "var_length" in group:
                lengths = (int(group["var_length"]),) * 2
            else:
                lengths = (int(group["min_length"]), int(group["max_length"]))
        except (KeyError, TypeError, ValueError):
            raise fail(name, "needs min_length and max_length (or var_length), integers") from None
        if not 0 <= lengths[0] <= lengths[1]:
            raise fail(name, f"min_length {lengths[0]} must be between 0 and max_length {lengths[1]}")
        infos = []
        for var in var_names:
            info = group.get("var_infos", {}).get(var)
            if not isinstance(info, dict):
                raise fail(f"{name}.var_infos.{var}", "missing")
            try:
                value = VarInfo(float(info["median"]), float(info["norm_factor"]), float(info["replace_inf_value"]),
                                float(info["lower_bound"]), float(info["upper_bound"]), float(info.get("pad", 0.0)))
            except (KeyError, TypeError, ValueError) as err:
                raise fail(f"{name}.var_infos.{var}", f"needs numbers median, norm_factor, replace_inf_value, "
                                                      f"lower_bound, upper_bound ({err})") from None
            if not value.lower_bound <= value.upper_bound:
                raise fail(f"{name}.var_infos.{var}", "lower_bound is above upper_bound")
            infos.append(value)
        groups.append(InputGroup(str(name), tuple(var_names), tuple(infos), *lengths))
    entry = "output_names" if "output_names" in data else "flav_names"
    outputs = data.get(entry, [])
    if isinstance(outputs, dict):  # name → the training's definition of it (a label or regression target)
        outputs = list(outputs)
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise fail(entry, "neither a list of names nor a mapping from names")
    return Preprocess(str(path), tuple(groups), tuple(outputs))


def model_mismatch(spec: Preprocess, inputs: Sequence[TensorSpec], batched: bool) -> str | None:
    """What keeps the inputs ``spec`` builds from fitting a model's declared ``inputs`` — names, data type,
    features per input, fixed lengths — in words, or None when they fit.

    Both are known when the job starts, so a preprocess.json paired with the wrong model fails then, not at
    the first event's request. ``batched``: the model's dims leave out the batch axis (Triton's
    ``max_batch_size > 0``); otherwise the first of them is the batch axis.
    """
    model = {tensor.name: tensor for tensor in inputs}
    ours = [group.name for group in spec.inputs]
    if sorted(ours) != sorted(model):
        return f"preprocess.json defines inputs {ours}, the model has {list(model)}"
    for group in spec.inputs:
        tensor = model[group.name]
        dims = tuple(tensor.dims) if batched else tuple(tensor.dims)[1:]
        where = f"input {group.name!r}"
        if tensor.datatype != "FP32":
            return f"{where} is {tensor.datatype} in the model; preprocess.json builds FP32"
        if len(dims) != 2:
            return f"{where} has dims {list(tensor.dims)} in the model; preprocess.json builds [features, length]"
        features, length = dims
        if features not in (-1, len(group.var_names)):
            return f"{where} has {len(group.var_names)} features in preprocess.json, {features} in the model"
        if length != -1 and not group.min_length == group.max_length == length:
            return (f"{where} is {group.min_length} to {group.max_length} entries long in preprocess.json; the "
                    f"model takes exactly {length}")
    return None


@functools.lru_cache(maxsize=256)
def _info_columns(infos: tuple[VarInfo, ...]) -> dict[str, np.ndarray]:
    """Each :class:`VarInfo` attribute as one array over ``infos`` (read-only), made once per input group:
    building them on every call costs as much as transforming a one-event batch."""
    out = {}
    for attr in ("median", "norm_factor", "replace_inf_value", "lower_bound", "upper_bound", "pad"):
        out[attr] = np.array([getattr(info, attr) for info in infos])
        out[attr].flags.writeable = False
    return out


def transform(values: np.ndarray, infos: tuple[VarInfo, ...] | VarInfo) -> np.ndarray:
    """CMSSW's per-value transformation: infinities replaced, centred, scaled and bounded (float64).

    ``values`` is one feature's values with one :class:`VarInfo`, or ``[rows, features]`` with one per column.
    """
    infos = (infos,) if isinstance(infos, VarInfo) else infos
    column = _info_columns(infos).__getitem__
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values) & (np.abs(values) <= INF_LIMIT)
    values = np.where(finite, values, column("replace_inf_value") if values.ndim == 2 else infos[0].replace_inf_value)
    if values.ndim == 2:
        return np.clip((values - column("median")) * column("norm_factor"), column("lower_bound"),
                       column("upper_bound"))
    info = infos[0]
    return np.clip((values - info.median) * info.norm_factor, info.lower_bound, info.upper_bound)


@dataclass(frozen=True)
class Entries:
    """Where one collection's rows (particles, SVs, lost tracks) sit: ``jet`` and ``rank`` (0 = first) of
    each row, and how many rows each of the event's ``n_jets`` jets has."""

    jet: np.ndarray
    rank: np.ndarray
    counts: np.ndarray


def build_inputs(spec: Preprocess, n_jets: int, entries: Callable[[str], Entries],
                 feature: Callable[[str], np.ndarray]) -> dict[str, np.ndarray]:
    """The model's inputs for all ``n_jets`` jets of a request (an event's, or a batch's), in ``spec``'s
    order (float32 ``[n_jets, features, length]`` each).

    Args:
        spec: the model's preprocess.json.
        n_jets: jets in the request.
        entries: for a feature name, the rows of the collection it describes (:class:`Entries`).
        feature: a feature's values, one per row of its collection.

    An input's length follows its first feature's collection (CMS's SONIC producer takes it from the
    ``*_etarel`` feature of the group); all features of one input describe the same collection.
    """
    inputs = {}
    for group in spec.inputs:
        rows = entries(group.var_names[0])
        length = group.length(rows.counts)
        keep = rows.rank < length
        jet, rank = rows.jet[keep], rows.rank[keep]
        pad = _info_columns(group.infos)["pad"].astype(np.float32)
        out = np.empty((n_jets, len(group.var_names), length), dtype=np.float32)
        out[:] = pad[None, :, None]
        columns = []
        for name in group.var_names:
            values = np.asarray(feature(name))
            if values.shape != rows.jet.shape:
                raise ConfigError(f"{spec.path!r}: input {group.name!r} mixes features of different collections "
                                  f"({group.var_names[0]!r} and {name!r})", key="preprocess_json")
            columns.append(values[keep])
        # written in the model's [jets, features, length] layout directly (no transposed copy of a batch's
        # inputs): the two advanced indices around the slice select each row's feature column
        out[jet, :, rank] = transform(np.stack(columns, axis=1) if columns else np.zeros((0, 0)), group.infos)
        inputs[group.name] = out
    return inputs


def jet_lengths(spec: Preprocess, entries: Callable[[str], Entries]) -> dict[str, np.ndarray]:
    """Each input's padded length for every jet alone, by input name (see :meth:`InputGroup.lengths`)."""
    return {group.name: group.lengths(entries(group.var_names[0]).counts) for group in spec.inputs}


def find_preprocess(explicit: str, model_dirs: list[Path], model: str) -> Path:
    """The preprocess.json to use: ``explicit`` when given (``$NAME`` taken from the environment; a relative
    path as given if it exists, else from the project), else ``preprocess.json`` in the model's folder."""
    if explicit:
        expanded = os.path.expandvars(explicit)
        unset = re.search(r"\$\{?(\w+)", expanded)
        if unset:
            raise ConfigError(f"{explicit!r} needs the environment variable {unset.group(1)}", key="preprocess_json")
        return project_path(expanded)
    for folder in model_dirs:
        if (folder / "preprocess.json").exists():
            return folder / "preprocess.json"
    where = ", ".join(map(str, model_dirs)) or "none here: the model is known only from a server"
    raise ConfigError(f"model {model!r} has no preprocess.json in its repository folder ({where}); give the file "
                      f"with 'preprocess_json'", key="preprocess_json")
