"""The ``--data`` copier, run as pods run it: a fresh interpreter with the package on its path."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from jupyter_disttrain import events as ev
from tests.signing import parse

REPO = Path(__file__).resolve().parents[2]


def run_stage(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[ev.Event], str]:
    """Exit status, the staging events and the whole output of one copier run."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.runtime.stage", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    events = [parse(line, None) for line in done.stdout.splitlines()]
    return done.returncode, [e for e in events if e.kind == "staging"], done.stdout + done.stderr


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_directory_is_copied_with_progress_and_a_second_run_resumes(tmp_path: Path) -> None:
    src = tmp_path / "dataset"
    (src / "train").mkdir(parents=True)
    (src / "train" / "part-0.bin").write_bytes(os.urandom(5 * 2**20))  # over one chunk
    (src / "labels.csv").write_text("a,b\n1,2\n")
    dest = tmp_path / "data"
    code, staged, out = run_stage(str(src), str(dest))
    assert code == 0, out
    assert tree(dest) == tree(src), out
    assert staged[0].staging()["state"] == "listing"
    last = staged[-1].staging()
    total = 5 * 2**20 + 8
    assert (last["state"], last["done"], last["total"], last["files_done"]) == (
        "done",
        total,
        total,
        2,
    ), out
    assert all(e.rank is None for e in staged)
    assert not list(dest.rglob("*.part-*"))
    # Already there with the same size: kept, not copied again (a persistent claim, a restart).
    os.utime(dest / "labels.csv", (1, 1))
    code, staged, out = run_stage(str(src), str(dest))
    assert code == 0 and os.stat(dest / "labels.csv").st_mtime == 1, out
    assert staged[-1].staging()["done"] == total


def test_s3_prefix_is_staged_from_an_s3_server(tmp_path: Path, s3: dict[str, str]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(
        endpoint_url=s3["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing"
    )
    fs.mkdir("stage-bucket")
    fs.pipe({"stage-bucket/ds/a.txt": b"alpha", "stage-bucket/ds/sub/b.txt": b"beta" * 1000})
    dest = tmp_path / "data"
    code, staged, out = run_stage("s3://stage-bucket/ds", str(dest), env=s3)
    assert code == 0, out
    assert tree(dest) == {"a.txt": b"alpha", "sub/b.txt": b"beta" * 1000}
    assert staged[-1].staging()["done"] == 4005 and staged[-1].staging()["files_total"] == 2
    code, staged, out = run_stage("s3://stage-bucket/missing", str(tmp_path / "x"), env=s3)
    assert code == 1, out
    failed = staged[-1].staging()
    assert failed["state"] == "failed" and "s3://stage-bucket/missing" in failed["message"], out
    assert "nothing there" in failed["message"] or "not found" in failed["message"], out


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_one_file_over_http_then_the_training_command(
    tmp_path: Path, http_root: tuple[str, Path]
) -> None:
    url, root = http_root
    (root / "corpus.txt").write_bytes(b"x" * 70000)
    dest = tmp_path / "data"
    marker = tmp_path / "ran"
    then = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('yes')"]
    code, staged, out = run_stage(f"{url}/corpus.txt", str(dest), "--then", *then)
    assert code == 0, out
    assert (dest / "corpus.txt").read_bytes() == b"x" * 70000
    assert staged[-1].staging()["total"] == 70000 and marker.read_text() == "yes"
    code, staged, out = run_stage(f"{url}/absent.bin", str(dest), "--then", *then[:1])
    assert code == 1 and "HTTP 404" in staged[-1].staging()["message"], out


def test_bad_arguments_name_the_fix(tmp_path: Path) -> None:
    code, _, out = run_stage("relative/path", str(tmp_path / "d"))
    assert code == 1 and "not a URL (s3://, gs://, https://) or an absolute path" in out
    code, _, out = run_stage("/a", "/b", "/c")
    assert code == 2 and "in pairs" in out
