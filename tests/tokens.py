"""JSON Web Tokens made by the tests themselves (RS256, keys made by ``openssl``: ``workflows/bench/_jwt.py``),
skipped where ``openssl`` is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sonic_hep.workflows.bench._jwt import AUDIENCE, ISSUER
from sonic_hep.workflows.bench._jwt import Issuer as _Issuer

__all__ = ["AUDIENCE", "ISSUER", "Issuer"]


class Issuer(_Issuer):
    @classmethod
    def make(cls, folder: Path, name: str) -> _Issuer:
        if shutil.which("openssl") is None:
            pytest.skip("openssl not installed (make install-test installs it)")
        return super().make(folder, name)
