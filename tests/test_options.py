"""Job options: common ones plus what each backend declares; errors name the fix."""

from __future__ import annotations

import argparse

import pytest

from jupyter_disttrain.backends.registry import backend_class, names
from jupyter_disttrain.options import add_job_options, declared_options, spec_from_args
from jupyter_disttrain.spec import SpecError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(list(argv))


def test_every_declared_backend_option_is_a_flag() -> None:
    declared = declared_options()
    for name in names():
        for option in backend_class(name).options:
            assert declared[option.key][1] == option
    args = parse(
        "--backend",
        "kubernetes",
        "--image",
        "img:1",
        "--volume",
        "c:/d",
        "--volume",
        "e:/f",
        "--payload-secret",
    )
    spec = spec_from_args(args)
    assert ("image", "img:1") in spec.options and ("payload_secret", "true") in spec.options
    assert [v for k, v in spec.options if k == "volume"] == ["c:/d", "e:/f"]


def test_an_option_of_another_backend_names_the_fix() -> None:
    with pytest.raises(
        SpecError, match=r"Kubernetes-only option\(s\) --gpus.*--backend kubernetes"
    ):
        spec_from_args(parse("--gpus", "2"))


def test_export_needs_a_backend_that_renders_manifests() -> None:
    with pytest.raises(SpecError, match=r"--export.*--backend kubernetes"):
        spec_from_args(parse("--export", "job.yaml"))


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(SpecError, match="choose one of: local, kubernetes"):
        spec_from_args(parse("--backend", "slurm"))


def test_tensorflow_restarts_need_a_backend_that_restarts_it() -> None:
    with pytest.raises(
        SpecError, match="--max-restarts with --framework tensorflow needs --backend kubernetes"
    ):
        spec_from_args(parse("--framework", "tensorflow", "--max-restarts", "1"))


def test_defaults_fill_what_is_not_given() -> None:
    spec = spec_from_args(parse("--name", "d"), {"nodes": 3, "nproc": 2, "timeout": 9.0})
    assert (spec.nodes, spec.nproc, spec.timeout, spec.backend) == (3, 2, 9.0, "local")


def test_an_option_with_an_optional_value_takes_one_or_none() -> None:
    alone = spec_from_args(parse("--backend", "kubernetes", "--prometheus", "--nodes", "2"))
    assert ("prometheus", "true") in alone.options and alone.nodes == 2
    given = spec_from_args(parse("--backend", "kubernetes", "--prometheus", "8000"))
    assert ("prometheus", "8000") in given.options
    data = parse("--backend", "kubernetes", "--data", "s3://b/x:/d", "--data", "gs://c/y:/e")
    assert [v for k, v in spec_from_args(data).options if k == "data"] == [
        "s3://b/x:/d",
        "gs://c/y:/e",
    ]


@pytest.mark.parametrize("text", ["inf", "1e400", "-inf", "nan"])
def test_time_options_must_be_finite(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--timeout", "--grace-period", "--hang-after"):
        with pytest.raises(SystemExit):
            parse(f"{flag}={text}")
        err = capsys.readouterr().err
        assert f"argument {flag}: {text!r} is not a finite number of seconds" in err, err


def test_time_options_are_at_most_a_year(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--timeout", "1e9")
    assert "1e9 seconds is more than a year; give at most 31622400" in capsys.readouterr().err
    assert spec_from_args(parse("--timeout", "3600")).timeout == 3600.0
