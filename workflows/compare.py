"""Compares two ROOT outputs branch by branch: the check behind "direct and SONIC give the same outputs".

Used by ``sonic compare``, ``sonic demo``, the benchmarks and the tests, so every place that claims
two runs agree measures it the same way: same entry count, same branches, jagged branches with the
same counts per entry, and every value within ``atol + rtol·|value|`` (numpy's ``isclose``): float32
outputs of order 100 (a MET in GeV) carry rounding differences of order 1e-5 when a server batches
events differently from an in-process run, which a purely absolute tolerance would call a difference.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import awkward as ak
import numpy as np
import uproot

from ..framework.errors import ExitCode, SonicError, did_you_mean


class CompareError(SonicError):
    """A file that cannot be compared (missing, not ROOT, no such tree): exit 2, like diff's "trouble",
    so that scripts can tell it from "the outputs differ" (exit 1)."""

    exit_code = ExitCode.USAGE


@dataclass
class Comparison:
    """The outcome of comparing two files' trees."""

    entries: tuple[int, int]
    atol: float = 1e-5
    rtol: float = 1e-5
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    outside: dict[str, int] = field(default_factory=dict)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    structure: list[str] = field(default_factory=list)

    @property
    def worst(self) -> float:
        return max(self.max_abs_diff.values(), default=0.0)

    def equal(self) -> bool:
        """Same entries, same branches, same structure, every value within ``atol + rtol·|value|``."""
        return (self.entries[0] == self.entries[1] and not self.only_in_a and not self.only_in_b
                and not self.structure and not any(self.outside.values()))

    def summary(self) -> str:
        verdict = "OK" if self.equal() else "DIFFERENT"
        lines = [f"entries: {self.entries[0]} vs {self.entries[1]}; {len(self.max_abs_diff)} branches compared; "
                 f"largest |difference| {self.worst:.3g}; {verdict} at atol {self.atol:g}, rtol {self.rtol:g} "
                 f"(|a - b| ≤ atol + rtol·|b|)"]
        if self.only_in_a or self.only_in_b:
            lines.append(f"branches only in the first: {self.only_in_a}; only in the second: {self.only_in_b}")
        lines += [f"structure differs: {name}" for name in self.structure]
        worst = sorted(self.max_abs_diff.items(), key=lambda kv: -kv[1])[:5]
        lines += [f"  {name:<32} {diff:.3g}" + (f"  ({self.outside[name]} values outside tolerance)"
                                                 if self.outside.get(name) else "") for name, diff in worst if diff > 0]
        return "\n".join(lines)


def compare_files(a: str, b: str, tree: str = "Events", atol: float = 1e-5, rtol: float = 1e-5) -> Comparison:
    """Compares tree ``tree`` of files ``a`` and ``b`` value by value.

    Example::

        cmp = compare_files("direct.root", "sonic.root")
        assert cmp.equal(), cmp.summary()
    """
    with _open(a) as fa, _open(b) as fb:
        ta, tb = _tree(fa, a, tree), _tree(fb, b, tree)
        result = Comparison(entries=(ta.num_entries, tb.num_entries), atol=atol, rtol=rtol)
        names_a, names_b = set(ta.keys()), set(tb.keys())
        result.only_in_a = sorted(names_a - names_b)
        result.only_in_b = sorted(names_b - names_a)
        if result.entries[0] != result.entries[1]:
            return result
        for name in sorted(names_a & names_b):
            x, y = _array(ta, a, name), _array(tb, b, name)
            if x.ndim > 1 and not ak.all(ak.num(x, axis=1) == ak.num(y, axis=1)):
                result.structure.append(name)
                continue
            fx = ak.to_numpy(ak.flatten(x, axis=None)).astype(np.float64)
            fy = ak.to_numpy(ak.flatten(y, axis=None)).astype(np.float64)
            if fx.shape != fy.shape:
                result.structure.append(name)
                continue
            close = np.isclose(fx, fy, atol=atol, rtol=rtol, equal_nan=True)
            diff = np.where(np.isnan(fx) & np.isnan(fy), 0.0, np.abs(fx - fy))
            result.max_abs_diff[name] = float(np.max(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0
            result.outside[name] = int(np.count_nonzero(~close))
    return result


@contextlib.contextmanager
def _open(path: str) -> Iterator[Any]:
    """The ROOT file ``path``, or a :class:`CompareError` saying why it cannot be read."""
    if "://" not in path:
        if not os.path.exists(path):
            raise CompareError(f"{path!r}: no such file")
        if os.path.isdir(path):
            raise CompareError(f"{path!r} is a directory, not a ROOT file")
    try:
        handle = uproot.open(path)
    except Exception as err:  # noqa: BLE001 - uproot raises many types for a file that is not ROOT
        raise CompareError(f"{path!r} is not a readable ROOT file ({type(err).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else ''})") from None
    with handle:
        yield handle


def _tree(handle: Any, path: str, tree: str) -> Any:
    try:
        return handle[tree]
    except uproot.KeyInFileError:
        keys = [k.split(";")[0] for k in handle.keys(recursive=False)]
        raise CompareError(f"{path!r} has no tree {tree!r}{did_you_mean(tree, keys)}; it holds {keys}") from None


def _array(tree: Any, path: str, branch: str) -> Any:
    try:
        return tree[branch].array(library="ak")
    except Exception as err:  # noqa: BLE001 - a corrupt basket raises whatever its decompressor raises
        raise CompareError(f"cannot read branch {branch!r} of {path!r} (corrupt file?): {type(err).__name__}") from None
