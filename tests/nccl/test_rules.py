"""Rules that must hold on any log: no "nothing to fix" next to an error, init read honestly."""

from __future__ import annotations

import pytest

from jupyter_disttrain.nccl import summarize

H = "node1:4242:4300 [0]"


def read(*lines: str) -> tuple[str, str, bool | None, str]:
    s = summarize(list(lines))
    return s.failure, s.diagnosis, s.init_complete, " ".join(s.raw_lines)


def test_an_unknown_warning_is_an_unrecognised_problem_quoted() -> None:
    failure, diagnosis, _, _ = read(
        f"{H} NCCL INFO NCCL version 2.21.5+cuda12.4",
        f"{H} misc/foo.cc:12 NCCL WARN Something odd happened with the frobnicator",
    )
    assert failure == "other"
    assert diagnosis.startswith("Unrecognised problem"), diagnosis
    assert "frobnicator" in diagnosis and "nothing to fix" not in diagnosis


def test_an_error_line_in_torch_words_is_never_nothing_to_fix() -> None:
    failure, diagnosis, _, _ = read(
        "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
    )
    assert failure != "none" and "nothing to fix" not in diagnosis, diagnosis


def test_a_benign_warning_is_named_but_not_called_nothing_to_fix() -> None:
    failure, diagnosis, _, _ = read(
        f"{H} NCCL INFO NCCL version 2.18.5+cuda12.0",
        f"{H} graph/tuning.cc:187 NCCL WARN CollNet is not supported, ignoring NCCL_ALGO=COLLNET",
        f"{H} NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
    )
    assert failure == "none" and "nothing to fix" not in diagnosis and "CollNet" in diagnosis


def test_init_is_false_when_a_failure_comes_before_init_complete() -> None:
    _, _, init, _ = read(
        f"{H} NCCL INFO NCCL version 2.19.3+cuda12.3",
        f"{H} NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        f"{H} misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<5555> "
        "failed : Software caused connection abort",
    )
    assert init is False
    _, _, later, _ = read(
        f"{H} NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
        f"{H} misc/socket.cc:484 NCCL WARN Net : Connection closed by remote peer 10.0.0.2<5555>",
    )
    assert later is True


@pytest.mark.parametrize(
    ("line", "failure", "words"),
    [
        (
            f"{H} NCCL INFO Call to connect returned Connection timed out, retrying",
            "connection",
            "MASTER_ADDR",
        ),
        (
            f"{H} NCCL INFO Call to connect returned Network is unreachable, retrying",
            "connection",
            "unreachable",
        ),
        (
            f"{H} transport/net_ib.cc:120 NCCL WARN NET/IB : ibv_query_gid failed (GID index 3)",
            "ib",
            "NCCL_IB_GID_INDEX",
        ),
        (
            f"{H} NCCL WARN Cuda failure 'CUDA driver version is insufficient for CUDA runtime "
            "version'",
            "other",
            "driver",
        ),
        (
            "ImportError: /usr/lib/libnccl.so.2: undefined symbol: ncclCommRegister",
            "other",
            "same torch / NCCL build",
        ),
        (
            "torch.distributed.DistStoreError: Duplicate rank 3 joined the rendezvous",
            "other",
            "checked in twice",
        ),
        (
            f"{H} init.cc:943 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA "
            "device 1a000",
            "other",
            "same GPU",
        ),
    ],
)
def test_classes_for_common_failures(line: str, failure: str, words: str) -> None:
    got, diagnosis, _, _ = read(line)
    assert got == failure and words in diagnosis, diagnosis


def test_a_version_mismatch_is_the_root_cause_of_the_closed_connections_after_it() -> None:
    failure, diagnosis, _, _ = read(
        f"{H} init.cc:1200 NCCL WARN NCCL version mismatch: 2.18.1 on rank 0, 2.21.5 on rank 1",
        f"{H} misc/socket.cc:50 NCCL WARN Net : Connection closed by remote peer n2<4000>",
    )
    assert failure == "other" and "disagree on versions" in diagnosis, diagnosis
