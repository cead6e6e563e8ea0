"""The configured default backend warmed before the magics load (``prewarm_configured``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from traitlets.config import Config

from jupyter_disttrain.backends import registry
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.magic_config import prewarm_configured


class WarmedBackend(LocalBackend):
    """A local backend that records the warm-ups asked of it instead of starting a launcher."""

    asked: ClassVar[list[tuple[str, float | None]]] = []

    def prewarm(self) -> None:
        WarmedBackend.asked.append((self.mode, self.linger))


@pytest.fixture
def warmed() -> Iterator[list[tuple[str, float | None]]]:
    registry.register("warmed", WarmedBackend)
    WarmedBackend.asked = []
    try:
        yield WarmedBackend.asked
    finally:
        registry.unregister("warmed")


def config(**values: Any) -> Config:
    c = Config()
    for key, value in values.items():
        setattr(c.DistrainMagics, key, value)
    return c


def test_the_configured_backend_is_warmed_with_its_launch_mode_and_linger(
    warmed: list[tuple[str, float | None]],
) -> None:
    assert prewarm_configured(config(backend="warmed", launch_mode="exec", linger=7.5))
    assert warmed == [("exec", 7.5)]
    assert prewarm_configured(config(backend="warmed"))
    assert warmed[-1] == ("fork", None)  # the magics' defaults: fork, the default linger


def test_prewarm_off_or_a_value_the_magics_refuse_warms_nothing(
    warmed: list[tuple[str, float | None]],
) -> None:
    assert not prewarm_configured(config(backend="warmed", prewarm=False))
    assert not prewarm_configured(config(backend="no-such-backend"))
    assert not prewarm_configured(config(backend="warmed", linger="soon"))
    assert warmed == []


PROBE = textwrap.dedent(
    """
    import gc, json, sys
    from IPython.testing.globalipapp import start_ipython
    from jupyter_disttrain.backends import registry
    from jupyter_disttrain.backends.local import LocalBackend

    magics_imported = []

    class Warmed(LocalBackend):
        def prewarm(self):
            magics_imported.append("jupyter_disttrain.magics" in sys.modules)
            magics_imported.append(gc.isenabled())

    registry.register("warmed", Warmed)
    shell = start_ipython()
    shell.config.DistrainMagics.backend = "warmed"
    shell.run_line_magic("load_ext", "jupyter_disttrain")
    magics_imported.append(gc.isenabled())
    print(json.dumps(magics_imported))
    """
)


def test_load_ext_warms_the_backend_before_importing_the_magics(tmp_path: Path) -> None:
    """In a fresh interpreter, ``%load_ext`` asks the configured backend to warm up once,
    before the magics module is imported (so its import overlaps the launcher's torch);
    the garbage collector is paused while the extension loads and running after."""
    env = dict(os.environ, DISTRAIN_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    magics_imported, collecting_then, collecting_after = json.loads(
        done.stdout.strip().splitlines()[-1]
    )
    assert (magics_imported, collecting_then, collecting_after) == (False, False, True), done.stdout
