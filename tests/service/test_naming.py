"""Default job names say where a job came from and stay valid everywhere a name goes."""

from __future__ import annotations

import re
from argparse import Namespace
from pathlib import Path

import pytest

from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService
from jupyter_disttrain.service.naming import MAX_NAME, readable_name, stem_of
from jupyter_disttrain.spec import NAME_RE

#: The fallback, today's time-stamped name.
STAMPED = re.compile(r"^job-\d{4}-\d{6}-[0-9a-f]{4}$")
#: RFC 1123 label (what Kubernetes checks for object names and label values).
RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("origin", "stem"),
    [
        ("/home/me/work/quickstart.ipynb", "quickstart"),
        ("notebooks/01 Quick_Start.ipynb", "quick-start"),
        ("C:\\Users\\me\\MNIST DDP.ipynb", "mnist-ddp"),
        ("train.py", "train"),
        ("scripts/train_resnet.v2.py", "train-resnet-v2"),
        ("pkg.train", "pkg-train"),
        ("Überblick.ipynb", "berblick"),
        ("2024.ipynb", ""),
        ("---.py", ""),
        ("", ""),
    ],
)
def test_stems(origin: str, stem: str) -> None:
    assert stem_of(origin) == stem


def test_a_notebook_cell_names_its_job() -> None:
    name = readable_name("/home/me/quickstart.ipynb", 3)
    assert re.fullmatch(r"quickstart-c3-[0-9a-f]{4}", name), name
    names = {readable_name("quickstart.ipynb", 3) for _ in range(50)}
    assert len(names) > 40  # 4 hex digits of randomness


def test_a_script_names_its_job_by_its_stem() -> None:
    assert re.fullmatch(r"train-[0-9a-f]{4}", readable_name("examples/train.py"))


def test_unknown_origins_fall_back_to_the_stamped_name() -> None:
    assert STAMPED.fullmatch(readable_name(None, 3))
    assert STAMPED.fullmatch(readable_name("2024.ipynb", 3))  # no letter to start with
    assert STAMPED.fullmatch(readable_name("/", None))


@pytest.mark.parametrize(
    "origin",
    [
        "a" * 200 + ".ipynb",
        "x-" * 60 + ".ipynb",
        "A very long notebook name about distributed training of transformers.ipynb",
        "weird \t name\n with $ymbols & dots...ipynb",
    ],
)
@pytest.mark.parametrize("cell", [None, 1, 42, 123456789])
def test_names_are_valid_jobs_labels_and_directories(
    origin: str, cell: int | None, tmp_path: Path
) -> None:
    name = readable_name(origin, cell)
    assert len(name) <= MAX_NAME
    assert NAME_RE.fullmatch(name), name  # the spec's rule (DNS-1035, 40 characters)
    assert RFC1123_LABEL.fullmatch(name) and len(name) <= 63
    assert "--" not in name[-6:]  # the stem was cut at a clean point
    if cell is not None:
        assert f"-c{cell}-" in name
    (tmp_path / name).mkdir()  # a local job directory


def parse(*argv: str) -> Namespace:
    import argparse

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(list(argv))


def test_the_service_names_a_job_after_its_origin_unless_named() -> None:
    service = JobService()
    spec = service.spec(parse(), origin="/nb/quickstart.ipynb", cell=7)
    assert re.fullmatch(r"quickstart-c7-[0-9a-f]{4}", spec.name)
    assert service.spec(parse("--name", "mine"), origin="/nb/quickstart.ipynb").name == "mine"
    assert STAMPED.fullmatch(service.spec(parse()).name)  # no origin: today's name
