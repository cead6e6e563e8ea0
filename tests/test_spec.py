from __future__ import annotations

import pytest

from jupyter_disttrain.spec import JobSpec, SpecError, parse_env, validate


def test_valid_spec_and_world_size() -> None:
    spec = validate(JobSpec("mnist-ddp", nodes=2, nproc=4, env=(("LR", "0.1"),)))
    assert spec.world_size == 8
    assert spec.env_dict() == {"LR": "0.1"}
    assert spec.with_(nodes=3).world_size == 12


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"name": "Bad Name"}, "job name"),
        ({"name": "x" * 41}, "job name"),
        ({"nodes": 0}, "--nodes"),
        ({"nproc": 1000}, "--nproc"),
        ({"backend": "slurm"}, "--backend"),
        ({"dist_backend": "mpi"}, "--dist-backend"),
        ({"timeout": 0.0}, "--timeout"),
        ({"max_restarts": -1}, "--max-restarts"),
        ({"max_restarts": 10**20}, "--max-restarts must be from 0 to 1000, got 1000000"),
        ({"env": (("RANK", "3"),)}, "RANK"),
        ({"tensorboard": " "}, "--tensorboard is empty; give a directory"),
        ({"mlflow": ""}, "--mlflow '' is not a tracking URI"),
        ({"mlflow": "http://a b"}, "is not a tracking URI; give one such as"),
    ],
)
def test_invalid_specs_name_the_problem(changes: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        JobSpec("ok").with_(**changes)


def test_parse_env() -> None:
    assert parse_env(["A=1", "B=x=y", "C="]) == (("A", "1"), ("B", "x=y"), ("C", ""))
    with pytest.raises(SpecError, match="KEY=VALUE"):
        parse_env(["NOVALUE"])
    with pytest.raises(SpecError, match="not a valid environment variable"):
        parse_env(["1X=2"])


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"name": "job\n"}, r"job name 'job\\n' is not allowed"),
        ({"timeout": float("inf")}, "--timeout must be a finite number of seconds, got inf; leave"),
        ({"timeout": float("nan")}, "--timeout must be a finite number"),
        ({"timeout": 1e12}, r"--timeout 1e\+12 is more than a year \(31622400 seconds\)"),
        ({"grace_period": float("inf")}, "--grace-period must be a finite number"),
        ({"hang_after": float("inf")}, "--hang-after must be a finite number.*0 turns"),
        ({"env": (("K\n", "1"),)}, r"environment variable name 'K\\n' is not valid"),
        ({"env": (("K", "a\0b"),)}, "--env K: the value contains a NUL character"),
        ({"checkpoint_dir": "/data/run\n"}, "--checkpoint-dir '/data/run\\\\n' contains a control"),
    ],
)
def test_input_a_shell_or_a_typo_can_produce_is_refused(
    changes: dict[str, object], needle: str
) -> None:
    with pytest.raises(SpecError, match=needle):
        JobSpec("ok").with_(**changes)


def test_env_keys_are_matched_whole() -> None:
    with pytest.raises(SpecError, match=r"--env key 'K\\n' is not a valid environment variable"):
        parse_env(["K\n=1"])
    with pytest.raises(SpecError, match="NUL character"):
        parse_env(["K=a\0"])
    assert parse_env(["K=line one\nline two"]) == (("K", "line one\nline two"),)
