"""Fixtures for the [reach] tests: a simulated internet of network namespaces (tests/reach/natsim.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .natsim import Internet, simulated_internet


@pytest.fixture
def internet() -> Iterator[Internet]:
    """The public machine's network and two homes behind NATs, in namespaces only this test uses;
    its hive machines are stopped (in parallel, each pid checked gone) and the namespaces deleted at
    teardown, also after a failure."""
    if shutil.which("nft") is None:
        pytest.fail("nft is missing: install the packages in .ci/apt-packages (nftables)", pytrace=False)
    with simulated_internet() as built:
        yield built
