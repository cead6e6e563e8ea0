"""Refresh the README's pictures of jobs from the browser tests' screenshots.

``python scripts/readme_pictures.py`` (or ``make readme-pictures``) reads the
dashboards ``tests/browser/test_cause_browser.py`` saved under
``test-output/browser-cause/{light,dark}/`` (the failing, recovered and hung
jobs), the paused rank's console (light and dark) ``tests/browser/test_debug_browser.py``
saved under ``test-output/debug/`` and the job ``tests/browser/test_autolog_browser.py``
saved under ``test-output/browser-autolog/``, and writes them, at most 960 px
wide and in 256 colours, to ``docs/`` (``failing-job.png``,
``failing-job-dark.png``, ``recovered-job.png``, ``recovered-job-dark.png``,
``hung-job.png``, ``hung-job-dark.png``, ``debug-console.png``,
``debug-console-dark.png``, ``lightning-job.png``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
SHOTS = OUTPUT / "browser-cause"
#: The cause test's dashboards by their screenshot's name, and the picture's.
JOBS = {"fail": "failing-job", "recover": "recovered-job", "hang": "hung-job"}
THEMES = {"light": "", "dark": "-dark"}
PICTURES = {
    **{
        SHOTS / theme / f"{key}-job.png": f"{name}{suffix}.png"
        for key, name in JOBS.items()
        for theme, suffix in THEMES.items()
    },
    OUTPUT / "debug" / "debug-console.png": "debug-console.png",
    OUTPUT / "debug" / "debug-console-dark.png": "debug-console-dark.png",
    OUTPUT / "browser-autolog" / "lightning-job.png": "lightning-job.png",
}
WIDTH = 960


def shrink(source: Path, target: Path) -> int:
    """Write ``source`` scaled to at most :data:`WIDTH` px wide, palette PNG; its size in bytes."""
    with Image.open(source) as image:
        picture = image.convert("RGB")
    if picture.width > WIDTH:
        picture = picture.resize(
            (WIDTH, round(picture.height * WIDTH / picture.width)), Image.Resampling.LANCZOS
        )
    picture.quantize(256, dither=Image.Dither.NONE).save(target, optimize=True)
    return target.stat().st_size


def main() -> int:
    missing = [str(shot) for shot in PICTURES if not shot.is_file()]
    if missing:
        print(
            f"no screenshots {', '.join(missing)}: run the browser tests first (pytest "
            "tests/browser/test_cause_browser.py tests/browser/test_debug_browser.py "
            "tests/browser/test_autolog_browser.py)",
            file=sys.stderr,
        )
        return 1
    for shot, picture in PICTURES.items():
        size = shrink(shot, REPO / "docs" / picture)
        print(f"docs/{picture}: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
