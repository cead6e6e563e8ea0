"""A rank's resource sampler (runtime/resources.py) and its quiet protocol lines."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import report, resources
from jupyter_disttrain.runtime.protocol import is_quiet
from tests.signing import parse


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def proc_cpu_seconds() -> float:
    """This process's user + system time as the kernel's /proc/self/stat counts it."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_cpu_is_percent_of_one_core_over_the_interval() -> None:
    sampler = resources.Sampler()
    cpu0, wall0 = proc_cpu_seconds(), time.monotonic()
    burn(0.4)
    busy = sampler.sample()
    cpu1, wall1 = proc_cpu_seconds(), time.monotonic()
    time.sleep(0.3)
    idle = sampler.sample()
    # the machine is shared: compare with the kernel's own count, not with 100%
    expected = 100 * (cpu1 - cpu0) / (wall1 - wall0)
    assert abs(busy["cpu_pct"] - expected) < 10, (busy, expected)
    assert idle["cpu_pct"] < 10 and busy["cpu_pct"] > idle["cpu_pct"], (busy, idle)


#: In a process of its own: a long-lived test process's allocator may hand out memory that
#: is resident already (freed by an earlier test), so a new block need not grow its RSS.
TOUCHES_64_MIB = """
import json, mmap
from jupyter_disttrain.runtime import resources
sampler = resources.Sampler()
before = sampler.sample()["rss_bytes"]
region = mmap.mmap(-1, 64 << 20)  # new pages, whatever the heap holds
for offset in range(0, len(region), mmap.PAGESIZE):
    region[offset] = 1  # written, so resident
after = sampler.sample()["rss_bytes"]
print(json.dumps([before, after]))
"""


def test_resident_memory_grows_with_what_the_process_touches() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TOUCHES_64_MIB], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert after - before >= 60 << 20, (before, after)
    assert resources.rss_bytes("/nonexistent/statm") is None


def test_memory_limit_is_the_smallest_cgroup_limit_up_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "kubepods" / "pod1").mkdir(parents=True)
    (root / "kubepods" / "pod1" / "memory.max").write_text("max\n")
    (root / "kubepods" / "memory.max").write_text("2147483648\n")
    (root / "memory.max").write_text("max\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/kubepods/pod1\n")
    assert resources.memory_limit(str(root), str(own)) == 2 << 30
    (root / "kubepods" / "pod1" / "memory.max").write_text("1073741824\n")
    assert resources.memory_limit(str(root), str(own)) == 1 << 30
    # a container with its own cgroup namespace: "0::/" and the limit at the root
    own.write_text("0::/\n")
    (root / "memory.max").write_text("536870912\n")
    assert resources.memory_limit(str(root), str(own)) == 512 << 20
    (root / "memory.max").write_text("max\n")
    assert resources.memory_limit(str(root), str(own)) is None
    assert resources.memory_limit(str(tmp_path / "none"), str(tmp_path / "none")) is None
    # cgroup v1 (a container's own memory controller), "unlimited" being a huge number
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert resources.memory_limit(str(v1), str(own)) is None
    (v1 / "memory" / "memory.limit_in_bytes").write_text("4294967296\n")
    assert resources.memory_limit(str(v1), str(own)) == 4 << 30


def test_gpu_device_follows_cuda_visible_devices() -> None:
    assert resources.gpu_device(1, None) == 1
    assert resources.gpu_device(1, "") == 1
    assert resources.gpu_device(1, "3,5") == 5
    assert resources.gpu_device(2, "3,5") == 3
    assert resources.gpu_device(0, "GPU-8f1a, GPU-77c2") == "GPU-8f1a"


@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is not None, reason="nvidia-ml-py is installed here"
)
def test_without_nvml_there_are_no_gpu_fields_at_all() -> None:
    sampler = resources.Sampler()
    fields = sampler.sample()
    assert sampler.gpu.handle is None and sampler.gpu.sample() == {}
    assert not {"gpu_util_pct", "gpu_mem_bytes"} & set(fields)


def test_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(resources.ENV_INTERVAL, raising=False)
    assert resources.interval() == 1.0
    monkeypatch.setenv(resources.ENV_INTERVAL, "0.25")
    assert resources.interval() == 0.25
    monkeypatch.setenv(resources.ENV_INTERVAL, "0")
    assert resources.interval() == 0.0
    monkeypatch.setenv(resources.ENV_INTERVAL, "often")
    assert resources.interval() == 1.0


def test_a_large_job_samples_less_often_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the whole job sends at most LINES_PER_SECOND resource lines a second; an
    interval set in the environment is kept whatever the size."""
    monkeypatch.delenv(resources.ENV_INTERVAL, raising=False)
    assert resources.interval(1) == resources.interval(512) == 1.0
    assert resources.interval(8192) == 16.0  # 8,192 ranks: 512 lines a second in all
    assert 8192 / resources.interval(8192) == resources.LINES_PER_SECOND
    monkeypatch.setenv(resources.ENV_INTERVAL, "0.25")
    assert resources.interval(8192) == 0.25
    monkeypatch.setenv(resources.ENV_INTERVAL, "often")
    assert resources.interval(8192) == 16.0


def test_resources_line_parses_and_is_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    emitted, quiet = report.emitted, report.quiet_bytes
    report.emit_as(3, "resources", cpu_pct=97.5, rss_bytes=1 << 30)
    line = capsys.readouterr().out
    assert report.emitted == emitted  # no activity for the hang watch
    assert report.quiet_bytes == quiet + len(line)
    assert is_quiet(line.encode()) and is_quiet(b"[rank 3] " + line.encode())
    event = parse(line, 3, nproc=4)
    assert (event.kind, event.rank) == ("resources", 3)
    assert event.resources() == {"cpu_pct": 97.5, "rss_bytes": 1 << 30}
    report.emit_as(3, "metric", step=1, values={"loss": 1.0})
    metric = capsys.readouterr().out
    assert report.emitted == emitted + 1 and not is_quiet(metric.encode())
    # rank 0 writing other ranks' lines: activity only if one of them is not quiet
    report.write_lines([line.strip(), ""])
    assert report.emitted == emitted + 1
    report.write_lines([line.strip(), metric.strip()])
    assert report.emitted == emitted + 2
    # each as rank 0 writes it: "relayed", a batch's loud lines before its quiet ones
    written = capsys.readouterr().out.splitlines()
    assert [is_quiet(text.encode()) for text in written] == [True, False, True], written
    assert report.quiet_bytes == quiet + len(line) + len(written[0]) + len(written[2]) + 2


def test_env_seconds_floor_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_disttrain.runtime import env

    monkeypatch.delenv("DISTRAIN_TEST_SECONDS", raising=False)
    assert env.seconds("DISTRAIN_TEST_SECONDS", 2.5) == 2.5
    monkeypatch.setenv("DISTRAIN_TEST_SECONDS", "-3")
    assert env.seconds("DISTRAIN_TEST_SECONDS", 2.5) == 0.0
    assert env.seconds("DISTRAIN_TEST_SECONDS", 2.5, least=1.0) == 1.0
    monkeypatch.setenv("DISTRAIN_TEST_SECONDS", "soon")
    assert env.seconds("DISTRAIN_TEST_SECONDS", 2.5) == 2.5
