"""Kubernetes option parsing: spellings, defaults, and an error for each bad option that names
the option, the problem and the fix; the checks against the kinds this tool creates."""

from __future__ import annotations

import pytest

from jupyter_disttrain.backends.kubernetes import kinds
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.kubernetes.options import (
    ConflictingOptionsError,
    K8sOptions,
    OptionError,
    OptionValueError,
    RepeatedOptionError,
    UnknownOptionError,
)
from jupyter_disttrain.spec import SpecError


def test_option_parsing_defaults_and_spellings() -> None:
    assert parse_options([]) == K8sOptions()
    opts = parse_options(
        [("--node-selector", "a=b"), ("NCCL", "ib, debug"), ("nccl", "ib"), ("payload-secret", "")]
    )
    assert opts.node_selector == (("a", "b"),) and opts.nccl == ("ib", "debug")
    assert opts.payload_secret is True
    assert parse_options([("payload_secret", "no")]).payload_secret is False
    assert parse_options([("local_hosts", "x")], ignore=["local-hosts"]) == K8sOptions()
    assert parse_options([("shm", "none")]).shm is False
    assert parse_options([("shm", "8Gi")]).shm_size == "8Gi"
    assert parse_options([("volume", "data:/mnt/data:rw")]).volumes[0].read_only is False


BAD_OPTIONS: list[tuple[list[tuple[str, str]], type[OptionError], list[str]]] = [
    ([("imgae", "x")], UnknownOptionError, ["--imgae", "did you mean --image"]),
    ([("image", "a"), ("image", "b")], RepeatedOptionError, ["--image", "twice"]),
    ([("image", "my image")], OptionValueError, ["--image", "image reference"]),
    ([("gpus", "two")], OptionValueError, ["--gpus", "whole number"]),
    ([("gpus", "-1")], OptionValueError, ["--gpus", "0 or more"]),
    ([("cpu", "500M")], OptionValueError, ["--cpu", "millions of cores", "500m"]),
    ([("cpu", "0")], OptionValueError, ["--cpu", "more than zero"]),
    ([("cpu", "4Gi")], OptionValueError, ["--cpu", "not a CPU quantity"]),
    ([("memory", "8GB")], OptionValueError, ["--memory", "8Gi", "8G"]),
    ([("memory", "16gi")], OptionValueError, ["--memory", "16Gi"]),
    ([("memory", "512m")], OptionValueError, ["--memory", "512Mi"]),
    ([("memory", "8")], OptionValueError, ["--memory", "only 8 bytes", "8Gi"]),
    ([("memory", "lots")], OptionValueError, ["--memory", "not a Kubernetes quantity"]),
    ([("shm", "big")], OptionValueError, ["--shm", "not a Kubernetes quantity"]),
    ([("nccl", "rdma")], OptionValueError, ["--nccl", "ib, socket, debug"]),
    ([("nccl", "ib"), ("nccl", "socket")], ConflictingOptionsError, ["--nccl ib", "keep one"]),
    ([("volume", "data")], OptionValueError, ["--volume", "CLAIM:/path"]),
    ([("volume", "Data_1:/data")], OptionValueError, ["--volume", "PersistentVolumeClaim name"]),
    ([("volume", "data:data")], OptionValueError, ["--volume", "absolute"]),
    ([("volume", "data:/data/../etc")], OptionValueError, ["--volume", "normalised"]),
    ([("volume", "data:/dev/shm")], OptionValueError, ["--volume", "/dev/shm", "/data"]),
    ([("volume", "data:/opt/disttrain/x")], OptionValueError, ["--volume", "/opt/disttrain"]),
    ([("volume", "a:/d"), ("volume", "b:/d")], ConflictingOptionsError, ["--volume", "/d"]),
    ([("node_selector", "gpu")], OptionValueError, ["--node-selector", "KEY=VALUE"]),
    ([("node_selector", "bad key=x")], OptionValueError, ["--node-selector", "label"]),
    ([("node_selector", "a=1"), ("node_selector", "a=2")], ConflictingOptionsError, ["twice"]),
    ([("toleration", "gpu=yes:Sometimes")], OptionValueError, ["--toleration", "NoSchedule"]),
    ([("toleration", "bad key:NoSchedule")], OptionValueError, ["--toleration", "taint key"]),
    ([("scheduler", "kube-batch")], OptionValueError, ["--scheduler", "volcano"]),
    ([("priority_class", "High_Priority")], OptionValueError, ["--priority-class", "lowercase"]),
    ([("queue", "Team A")], OptionValueError, ["--queue", "63"]),
    ([("namespace", "ML")], OptionValueError, ["--namespace", "lowercase"]),
    ([("service_account", " ")], OptionValueError, ["--service-account", "needs a value"]),
    ([("image_pull_secret", "reg/cred")], OptionValueError, ["--image-pull-secret"]),
    ([("payload_secret", "maybe")], OptionValueError, ["--payload-secret", "true or false"]),
    ([("elastic", "4")], OptionValueError, ["--elastic", "MIN:MAX"]),
    ([("elastic", "4:2")], OptionValueError, ["--elastic", "MIN <= MAX"]),
    ([("elastic", "0:2")], OptionValueError, ["--elastic", "1 <= MIN"]),
    ([("kubeflow_api", "mpijob")], OptionValueError, ["--kubeflow-api", "pytorchjob", "trainjob"]),
    ([("prometheus", "70000")], OptionValueError, ["--prometheus", "1024-65535"]),
]


@pytest.mark.parametrize(("options", "error", "words"), BAD_OPTIONS)
def test_bad_options_raise_clear_errors(
    options: list[tuple[str, str]], error: type[OptionError], words: list[str]
) -> None:
    with pytest.raises(error) as info:
        parse_options(options)
    assert isinstance(info.value, SpecError) and isinstance(info.value, ValueError)
    for word in words:
        assert word in str(info.value)


def test_the_metrics_port_may_not_be_a_training_containers_own() -> None:
    for kind in kinds.KINDS:
        with pytest.raises(OptionValueError, match=rf"--prometheus.*other than .*{kind.port}"):
            parse_options([("prometheus", str(kind.port))])
    assert parse_options([("prometheus", "9100")]).prometheus == 9100


def test_each_api_the_kinds_create_may_be_asked_for() -> None:
    for api in kinds.apis():
        assert parse_options([("kubeflow_api", api.upper())]).kubeflow_api == api
