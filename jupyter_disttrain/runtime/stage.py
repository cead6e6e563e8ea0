"""The data copier of ``--data``: stage sources into directories before training starts.

Standard library and fsspec (which torch itself depends on). Runs in the
stock image, as an init container (PyTorchJob, TFJob) or in front of
torchrun in the training container (TrainJob), with the payload directory on
``PYTHONPATH``::

    python -m jupyter_disttrain.runtime.stage SRC DEST [SRC DEST ...] [--then CMD ...]

A source is ``s3://``, ``gs://`` (fsspec with s3fs / gcsfs, installed with
``pip install --user`` into ``$PYTHONUSERBASE`` when missing), ``https://``
or ``http://`` (one file, the standard library) or an absolute path (a
directory or file on a mounted volume). Each file is written to a temporary
name and renamed, and a file already there with the same size is kept, so
a restarted pod or a persistent claim resumes instead of copying again.
Progress goes to stdout as ``staging`` protocol lines (at most two a second
per source, and one at the end), failures as a ``staging`` line with
``state: failed`` and the copier's message, then exit status 1. With
``--then`` the command replaces this process once everything is staged.
"""

from __future__ import annotations

import argparse
import importlib
import os
import posixpath
import site
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

from . import jobkey
from .protocol import encode

CHUNK: Final = 4 * 2**20
#: Seconds between progress lines of one source.
EVERY: Final = 0.5
#: The fsspec implementation each URL scheme needs, as (import name, pip requirement).
PACKAGES: Final = {"s3": ("s3fs", "s3fs"), "gs": ("gcsfs", "gcsfs"), "gcs": ("gcsfs", "gcsfs")}
EXIT_FAILED: Final = 1


Opener = Callable[[str], BinaryIO]


class StageError(Exception):
    """A source that cannot be staged; the message names the source and the fix."""


@dataclass
class Progress:
    """What one source has copied so far; ``emit`` writes it as a ``staging`` line."""

    src: str
    dest: str
    total: int | None = None
    done: int = 0
    files_total: int = 0
    files_done: int = 0
    state: str = "listing"
    last: float = 0.0

    def emit(self, *, force: bool = False, message: str | None = None) -> None:
        now = time.monotonic()
        if not force and now - self.last < EVERY:
            return
        self.last = now
        fields: dict[str, Any] = {
            "src": self.src,
            "dest": self.dest,
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "files_done": self.files_done,
            "files_total": self.files_total,
            "host": os.environ.get("HOSTNAME") or socket.gethostname(),
        }
        if message is not None:
            fields["message"] = message
        sys.stdout.write(encode("staging", None, sign_with=jobkey.signer(), **fields) + "\n")
        sys.stdout.flush()


# --- sources ---------------------------------------------------------------------------------


def _scheme(src: str) -> str:
    return urllib.parse.urlsplit(src).scheme.lower() if "://" in src else ""


def _ensure_package(scheme: str) -> None:
    """Import the fsspec implementation of ``scheme``; pip-install it for this user if missing."""
    if scheme not in PACKAGES:
        return
    module, requirement = PACKAGES[scheme]
    try:
        importlib.import_module(module)
        return
    except ImportError:
        pass
    print(f"distrain: {module} is not in this image; installing {requirement}", flush=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--user",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--",
        requirement,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise StageError(
            f"{scheme}:// needs the {requirement} package and `pip install {requirement}` "
            f"failed ({' / '.join(tail)}); use --data-image with an image that has it, or "
            "let the pods reach a package index"
        )
    importlib.invalidate_caches()
    site.addsitedir(site.getusersitepackages())
    importlib.import_module(module)


def _files(fs: Any, root: str, src: str) -> list[tuple[str, int]]:
    """Every file under ``root`` (or ``root`` itself) as (path relative to root, size)."""
    if fs.isfile(root):
        return [(posixpath.basename(root.rstrip("/")), int(fs.size(root) or 0))]
    found = fs.find(root, detail=True)
    if not found:
        raise StageError(f"{src}: nothing there (no such file or directory, or it is empty)")
    prefix = fs._strip_protocol(root).rstrip("/") + "/"
    out = []
    for path, info in sorted(found.items()):
        rel = path[len(prefix) :] if path.startswith(prefix) else posixpath.basename(path)
        out.append((rel, int(info.get("size") or 0)))
    return out


def _open_fsspec(src: str) -> tuple[list[tuple[str, int]], Opener]:
    import fsspec

    scheme = _scheme(src)
    _ensure_package(scheme)
    fs, root = fsspec.core.url_to_fs(src)
    files = _files(fs, root, src)
    single = fs.isfile(root)

    def opener(rel: str) -> BinaryIO:
        path = root if single else posixpath.join(root.rstrip("/"), rel)
        handle: BinaryIO = fs.open(path, "rb")
        return handle

    return files, opener


def _open_http(src: str) -> tuple[list[tuple[str, int]], Opener]:
    name = posixpath.basename(urllib.parse.urlsplit(src).path.rstrip("/")) or "index.html"
    try:
        with urllib.request.urlopen(urllib.request.Request(src, method="HEAD"), timeout=60) as r:
            size = int(r.headers.get("Content-Length") or 0)
    except urllib.error.HTTPError as exc:
        if exc.code != 405:  # servers that refuse HEAD still serve GET
            raise
        size = 0

    def opener(_rel: str) -> BinaryIO:
        handle: BinaryIO = urllib.request.urlopen(src, timeout=60)
        return handle

    return [(name, size)], opener


def _copy(
    progress: Progress, files: list[tuple[str, int]], opener: Callable[[str], BinaryIO]
) -> None:
    for rel, size in files:
        target = os.path.join(progress.dest, *rel.split("/"))
        if os.path.isfile(target) and size and os.path.getsize(target) == size:
            progress.done += size  # staged before (a restarted pod, a persistent claim)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            partial = f"{target}.part-{os.getpid()}"
            try:
                with opener(rel) as source, open(partial, "wb") as out:
                    for chunk in _chunks(source):
                        out.write(chunk)
                        progress.done += len(chunk)
                        progress.emit()
                os.replace(partial, target)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
        progress.files_done += 1
        progress.emit()


def _chunks(source: BinaryIO) -> Iterator[bytes]:
    while True:
        chunk = source.read(CHUNK)
        if not chunk:
            return
        yield chunk


def stage(src: str, dest: str) -> Progress:
    """Copy ``src`` into directory ``dest``; the final progress. Raises :class:`StageError`."""
    progress = Progress(src, dest)
    progress.emit(force=True)
    scheme = _scheme(src)
    try:
        if scheme in ("http", "https"):
            files, opener = _open_http(src)
        elif scheme or src.startswith("/"):
            files, opener = _open_fsspec(src)
        else:
            raise StageError(f"{src}: not a URL (s3://, gs://, https://) or an absolute path")
        progress.files_total = len(files)
        progress.total = sum(size for _, size in files) or None
        progress.state = "copying"
        progress.emit(force=True)
        os.makedirs(dest, exist_ok=True)
        _copy(progress, files, opener)
    except StageError:
        raise
    except FileNotFoundError as exc:
        raise StageError(f"{src}: not found ({exc})") from None
    except PermissionError as exc:
        raise StageError(
            f"{src}: access denied ({exc}); give the pods credentials (--env or a service "
            "account) that can read it"
        ) from None
    except urllib.error.HTTPError as exc:
        raise StageError(f"{src}: HTTP {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise StageError(f"{src}: {type(exc).__name__}: {exc}") from None
    progress.state = "done"
    progress.emit(force=True)
    return progress


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: stage every SRC DEST pair, then exec ``--then`` if given."""
    parser = argparse.ArgumentParser(prog="python -m jupyter_disttrain.runtime.stage")
    parser.add_argument("pairs", nargs="+", metavar="SRC DEST")
    parser.add_argument("--then", nargs=argparse.REMAINDER, default=[], metavar="CMD")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if len(args.pairs) % 2:
        parser.error("give sources and destinations in pairs: SRC DEST [SRC DEST ...]")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    for src, dest in pairs:
        try:
            done = stage(src, dest)
        except StageError as exc:
            failed = Progress(src, dest, state="failed")
            failed.emit(force=True, message=str(exc))
            print(f"distrain: staging {src} into {dest} failed: {exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        print(
            f"distrain: staged {src} into {dest}: {done.files_done} files, {done.done} bytes",
            flush=True,
        )
    if args.then:
        os.execvp(args.then[0], args.then)
    return 0


if __name__ == "__main__":
    sys.exit(main())
