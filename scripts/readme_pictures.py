"""Refresh the README's pictures of jobs from the browser tests' screenshots.

``python scripts/readme_pictures.py`` (or ``make readme-pictures``) reads the
dashboards ``tests/browser/test_cause_browser.py`` saved under
``test-output/browser-cause/light/`` and the one
``tests/browser/test_autolog_browser.py`` saved under
``test-output/browser-autolog/`` and writes them, at most 960 px wide and in
256 colours, to ``docs/failing-job.png``, ``docs/hung-job.png`` and
``docs/lightning-job.png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "test-output"
SHOTS = OUTPUT / "browser-cause" / "light"
PICTURES = {
    SHOTS / "fail-job.png": "failing-job.png",
    SHOTS / "hang-job.png": "hung-job.png",
    OUTPUT / "browser-autolog" / "lightning-job.png": "lightning-job.png",
}
WIDTH = 960


def shrink(source: Path, target: Path) -> int:
    """Write ``source`` scaled to at most :data:`WIDTH` px wide, palette PNG; its size in bytes."""
    with Image.open(source) as image:
        picture = image.convert("RGB")
    if picture.width > WIDTH:
        picture = picture.resize((WIDTH, round(picture.height * WIDTH / picture.width)),
                                 Image.Resampling.LANCZOS)  # fmt: skip
    picture.quantize(256, dither=Image.Dither.NONE).save(target, optimize=True)
    return target.stat().st_size


def main() -> int:
    missing = [str(shot) for shot in PICTURES if not shot.is_file()]
    if missing:
        print(
            f"no screenshots {', '.join(missing)}: run the browser tests first (pytest "
            "tests/browser/test_cause_browser.py tests/browser/test_autolog_browser.py)",
            file=sys.stderr,
        )
        return 1
    for shot, picture in PICTURES.items():
        size = shrink(shot, REPO / "docs" / picture)
        print(f"docs/{picture}: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
