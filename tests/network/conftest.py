"""The network lab for tests: two namespaces and a shaped link, made once per test module and removed after
it, or a skip naming why this machine cannot make them (not root, no iproute2)."""

from __future__ import annotations

import pytest

from sonic_hep.workflows.netlab import LabRefused, NetworkLab


@pytest.fixture(scope="module")
def network_lab():
    """A :class:`NetworkLab` with an unshaped link (tests shape it as they need; the next test reshapes it)."""
    try:
        lab = NetworkLab().open()
    except LabRefused as refusal:
        pytest.skip(str(refusal))
    try:
        yield lab
    finally:
        lab.close()
