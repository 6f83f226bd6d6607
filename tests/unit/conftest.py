"""Fixtures for every unit test."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from berth.logs import BERTH_LOGGER


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Undo what a command's ``main()`` does to logging (``berth.logs.configure``: a handler on
    the root logger, the root's and Berth's levels), so that a test that runs a command leaves
    the next one (in this process, e.g. a caplog test in tests/contract) logging as before."""
    root = logging.getLogger()
    berth = logging.getLogger(BERTH_LOGGER)
    handlers, root_level, berth_level = list(root.handlers), root.level, berth.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(root_level)
    berth.setLevel(berth_level)
