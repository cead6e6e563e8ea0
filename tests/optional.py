"""Skipping the tests of an optional library that is not installed, without importing it.

``pytest.importorskip`` at a test module's top imports the library while the
module is collected, and every pytest process collects every module:
TensorFlow, Lightning and the like then cost each process seconds of CPU
before any test runs. :func:`requires` asks only whether the library can be
found; the tests that use it import it themselves (in their cells, mostly).
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest


def requires(module: str, reason: str | None = None) -> pytest.MarkDecorator:
    """A mark skipping its tests when top-level module ``module`` cannot be found."""
    return pytest.mark.skipif(
        find_spec(module) is None, reason=reason or f"{module} is not installed"
    )
