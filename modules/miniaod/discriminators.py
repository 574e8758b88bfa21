"""Discriminators from class probabilities, as CMS defines them (``BTagProbabilityToDiscriminator``, used by
``pfParticleNet*DiscriminatorsJetTags``): the sum of the numerator classes divided by the sum of the
denominator classes, e.g. ``TvsQCD = (Tbcq + Tbqq) / (Tbcq + Tbqq + QCDbb + QCDcc + QCDb + QCDc + QCDothers)``.

An empty denominator means 1 (the discriminator is the numerator's sum). Where the denominator is 0 or the
numerator negative (a jet CMS marks undefined), the value is -10, CMS's marker.

Configured per producer as name → class lists::

    discriminators:
      BvsAll: {numerator: [b, bb], denominator: [b, bb, c, cc, uds, g]}
      CvsL:   {numerator: [c, cc], denominator: [c, cc, uds, g]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from ...framework import ConfigError


#: CMS's value for a jet whose discriminator is undefined
UNDEFINED = -10.0


@dataclass(frozen=True)
class Discriminator:
    """``sum(p[numerator]) / sum(p[denominator])`` over class indices."""

    name: str
    numerator: tuple[int, ...]
    denominator: tuple[int, ...]

    def __call__(self, probs: np.ndarray) -> np.ndarray:
        """Per jet, for ``probs`` of shape ``[jets, classes]`` (float32, as CMS computes it)."""
        probs = np.asarray(probs, dtype=np.float32)
        num = probs[:, list(self.numerator)].sum(axis=1, dtype=np.float32)
        if not self.denominator:
            return num
        den = probs[:, list(self.denominator)].sum(axis=1, dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((den != 0) & (num >= 0), num / den, np.float32(UNDEFINED)).astype(np.float32)


def make_discriminators(definitions: Mapping[str, Mapping[str, Sequence[str]] | Sequence[str]],
                        classes: Sequence[str], model: str, key: str) -> list[Discriminator]:
    """Discriminators from configured class names; a class the model does not have, or a definition that is
    neither a list (numerator only) nor ``{numerator: [...], denominator: [...]}``, is one
    :class:`ConfigError` naming the discriminator (``key`` is its configuration key)."""
    out = []
    for name, definition in definitions.items():
        if isinstance(definition, Mapping):
            extra = set(definition) - {"numerator", "denominator"}
            if extra or "numerator" not in definition:
                raise ConfigError(f"discriminator {name!r} needs 'numerator' (and optionally 'denominator') class "
                                  f"lists, got keys {sorted(definition)}", key=key)
            numerator, denominator = definition["numerator"], definition.get("denominator", [])
        else:
            numerator, denominator = definition, []
        unknown = [c for c in (*numerator, *denominator) if c not in classes]
        if unknown or not numerator:
            raise ConfigError(f"discriminator {name!r} uses {unknown or 'no classes'}, which are not classes of "
                              f"model {model!r}: {list(classes)}", key=key)
        out.append(Discriminator(name, tuple(classes.index(c) for c in numerator),
                                 tuple(classes.index(c) for c in denominator)))
    return out
