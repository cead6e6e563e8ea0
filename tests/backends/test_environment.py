"""One mapping from a spec to its workers' environment, used by every backend."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.backends.environment import PG_TIMEOUT, spec_env
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.kubernetes.template import worker_env
from jupyter_disttrain.backends.local import build_plan
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec

FULL = dict(
    timeout=90.5,
    resume="s3://b/$run/ckpt",
    grace_period=12.0,
    hang_after=30.0,
    autolog="off",
    post_mortem=True,
    where_locals=True,
)


def test_a_plain_spec_sets_nothing() -> None:
    assert spec_env(JobSpec("plain").with_()) == {}


def test_every_option_becomes_its_variable() -> None:
    spec = JobSpec("full", **FULL).with_()  # type: ignore[arg-type]
    assert spec_env(spec) == {
        PG_TIMEOUT: "91",
        "DISTRAIN_RESUME": "s3://b/$run/ckpt",
        "DISTRAIN_GRACE_PERIOD": "12",
        "DISTRAIN_HANG_AFTER": "30",
        "DISTRAIN_AUTOLOG": "off",
        "DISTRAIN_POST_MORTEM": "1",
        "DISTRAIN_WHERE_LOCALS": "1",
    }
    assert spec_env(spec, escape=str.upper)["DISTRAIN_RESUME"] == "S3://B/$RUN/CKPT"
    assert spec_env(JobSpec("short", timeout=2).with_())[PG_TIMEOUT] == "30"  # at least 30 s


def test_both_backends_give_their_workers_the_same_mapping(tmp_path: Path) -> None:
    spec = JobSpec("both", **FULL).with_()  # type: ignore[arg-type]
    payload = build_payload("x = 1", {}, job=spec.name)
    local = build_plan(spec, payload, tmp_path / "job", mode="exec", port=1)
    for node in local.nodes:
        assert spec_env(spec).items() <= node.env.items(), node.env
    pod = {e["name"]: e["value"] for e in worker_env(spec, parse_options(spec.options))}
    kubelet = spec_env(spec, escape=lambda v: v.replace("$", "$$"))
    assert kubelet.items() <= pod.items(), pod
    assert pod["DISTRAIN_RESUME"] == "s3://b/$$run/ckpt"  # the kubelet expands $(VAR)


def test_a_users_env_still_sets_the_group_timeout_locally(tmp_path: Path) -> None:
    spec = JobSpec("mine", timeout=90, env=((PG_TIMEOUT, "7"),)).with_()
    payload = build_payload("x = 1", {}, job=spec.name)
    (node,) = build_plan(spec, payload, tmp_path / "job", mode="exec", port=1).nodes
    assert node.env[PG_TIMEOUT] == "7"
