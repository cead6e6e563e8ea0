"""Storage for checkpoint directories: local paths with the standard library, URLs with fsspec.

:func:`open_fs` turns a path or URL into a filesystem object with the few
operations the checkpoint code needs. Local writes are atomic and durable
(temporary name, flush, fsync, rename, fsync of the directory); on object
stores an object appears whole when its upload completes, so data is
written in place and the record written after it is the commit point.
fsspec is imported only for URLs, so local paths work in an image without it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from typing import IO, Any

from .format import TMP_PREFIX, CheckpointError

#: fsspec protocols and the package that provides each (for the "not installed" message).
PROTOCOL_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "hf": "huggingface_hub",
    "hdfs": "pyarrow",
}
#: Protocols whose objects appear atomically when written (no rename needed).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory"})


#: What the checkpoint code creates on a local disk is the owner's only (a state holds
#: the model and whatever else the cell saved); directories that exist keep their mode.
DIR_MODE = 0o700
FILE_MODE = 0o600


def makedirs_private(path: str) -> None:
    """Create ``path`` and its missing parents, each readable by the owner only.

    Directories that already exist (the user's, or another rank's just now) keep their mode.
    """
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue
        os.chmod(directory, DIR_MODE)  # exactly, whatever the umask


def open_private(path: str) -> IO[bytes]:
    """A new file at ``path`` (it must not exist) that only the owner can read."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb")


def protocol_of(uri: str) -> str | None:
    """``"s3"`` for ``s3://b/k``; ``None`` for a local path or ``file://`` URL."""
    if "://" not in uri:
        return None
    proto = uri.split("://", 1)[0].lower()
    return None if proto in ("file", "local") else proto


def local_path(uri: str) -> str:
    """The absolute local path of a path or ``file://`` URL."""
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return os.path.abspath(os.path.expanduser(uri))


class LocalFS:
    """A local directory tree (standard library only)."""

    protocol = "file"

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def uri(self, path: str) -> str:
        return path

    def makedirs(self, path: str) -> None:
        makedirs_private(path)

    def names(self, path: str) -> list[str]:
        """Names in ``path`` (no sizes: one system call); empty if absent."""
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def listdir(self, path: str) -> dict[str, int | None]:
        """Names in ``path`` with sizes (``None`` for directories); empty if absent."""
        out: dict[str, int | None] = {}
        try:
            with os.scandir(path) as it:
                for item in it:
                    try:
                        out[item.name] = None if item.is_dir() else item.stat().st_size
                    except OSError:
                        continue
        except FileNotFoundError:
            pass
        return out

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[IO[bytes]]:
        with open(path, "rb") as fh:
            yield fh

    @contextlib.contextmanager
    def atomic_write(self, path: str, fsync: bool = True) -> Iterator[IO[bytes]]:
        """Write to a temporary name beside ``path``; on success flush, fsync, rename."""
        folder, name = os.path.split(path)
        tmp = os.path.join(folder, f"{TMP_PREFIX}{secrets.token_hex(4)}-{name}")
        fh = open_private(tmp)  # closed below on every path
        try:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
            fh.close()
            os.replace(tmp, path)
            if fsync:
                self.fsync_dir(folder)
        except BaseException:
            fh.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def write_bytes(self, path: str, data: bytes, fsync: bool = True) -> None:
        with self.atomic_write(path, fsync) as fh:
            fh.write(data)

    def temp_dir(self, folder: str, name: str) -> str:
        """A fresh directory beside the final ``name`` for a multi-file write."""
        path = os.path.join(folder, f"{TMP_PREFIX}{secrets.token_hex(4)}-{name}")
        os.mkdir(path, DIR_MODE)
        os.chmod(path, DIR_MODE)
        return path

    def commit_dir(self, tmp: str, path: str, fsync: bool = True) -> None:
        """Make a fully written temporary directory appear under its final name.

        Its files (written by torch or TensorFlow with the usual modes) become the owner's only.
        """
        for folder, dirs, files in os.walk(tmp):
            for name in dirs:
                os.chmod(os.path.join(folder, name), DIR_MODE)
            for name in files:
                os.chmod(os.path.join(folder, name), FILE_MODE)
        if fsync:
            for name in os.listdir(tmp):
                fd = os.open(os.path.join(tmp, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self.fsync_dir(tmp)
        os.replace(tmp, path)
        if fsync:
            self.fsync_dir(os.path.dirname(path))

    @staticmethod
    def fsync_dir(path: str) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def remove(self, path: str) -> None:
        """Remove a file or directory tree; absent is fine."""
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def mtime(self, path: str) -> float | None:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return None


class FsspecFS:
    """Any fsspec filesystem (``s3://``, ``gs://``, ``memory://`` ...)."""

    def __init__(self, fs: Any, protocol: str) -> None:
        self.fs = fs
        self.protocol = protocol
        self.object_store = protocol in OBJECT_STORES

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))

    def uri(self, path: str) -> str:
        return f"{self.protocol}://{path}"

    def makedirs(self, path: str) -> None:
        with contextlib.suppress(FileExistsError):
            self.fs.makedirs(path, exist_ok=True)

    def names(self, path: str) -> list[str]:
        return list(self.listdir(path))

    def listdir(self, path: str) -> dict[str, int | None]:
        self.fs.invalidate_cache(path)
        try:
            items = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return {}
        out: dict[str, int | None] = {}
        for item in items:
            name = str(item["name"]).rstrip("/").rsplit("/", 1)[-1]
            is_dir = item.get("type") == "directory"
            out[name] = None if is_dir else int(item.get("size") or 0)
        return out

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[IO[bytes]]:
        with self.fs.open(path, "rb") as fh:
            yield fh

    @contextlib.contextmanager
    def atomic_write(self, path: str, fsync: bool = True) -> Iterator[IO[bytes]]:
        """Object stores: write in place (the object appears whole); others: temp + move."""
        target = path
        if not self.object_store:
            folder, name = path.rsplit("/", 1)
            target = f"{folder}/{TMP_PREFIX}{secrets.token_hex(4)}-{name}"
        try:
            with self.fs.open(target, "wb") as fh:
                yield fh
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm(target)
            raise
        if target != path:
            self.fs.mv(target, path)

    def write_bytes(self, path: str, data: bytes, fsync: bool = True) -> None:
        with self.atomic_write(path, fsync) as fh:
            fh.write(data)

    def temp_dir(self, folder: str, name: str) -> str:
        if self.object_store:  # written in place; the record commits it
            return f"{folder}/{name}"
        return f"{folder}/{TMP_PREFIX}{secrets.token_hex(4)}-{name}"

    def commit_dir(self, tmp: str, path: str, fsync: bool = True) -> None:
        if tmp != path:
            self.fs.mv(tmp, path, recursive=True)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path, recursive=True)

    def mtime(self, path: str) -> float | None:
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        stamp = info.get("LastModified") or info.get("mtime") or info.get("created")
        timestamp = getattr(stamp, "timestamp", None)
        return float(timestamp()) if callable(timestamp) else None


FileSystem = LocalFS | FsspecFS


def missing_package_message(uri: str, proto: str, detail: str = "") -> str:
    """The error text for a URL whose fsspec implementation is not installed."""
    package = PROTOCOL_PACKAGES.get(proto, f"the fsspec implementation of {proto}://")
    extra = f" ({detail})" if detail else ""
    return (
        f"checkpoint location {uri}: the {proto}:// protocol needs fsspec and {package}, "
        f"which are not installed here{extra}; pip install fsspec {package} (on Kubernetes "
        f"add --pip fsspec --pip {package}, or use an image that has them)"
    )


def open_fs(uri: str, storage_options: dict[str, Any] | None = None) -> tuple[FileSystem, str]:
    """``(filesystem, root path)`` for a checkpoint location; raise :class:`CheckpointError`."""
    if not uri or not str(uri).strip():
        raise CheckpointError("checkpoint location is empty; pass --checkpoint-dir PATH or URL")
    uri = str(uri).strip()
    proto = protocol_of(uri)
    if proto is None:
        return LocalFS(), local_path(uri)
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError:
        raise CheckpointError(missing_package_message(uri, proto, "no fsspec")) from None
    try:
        fsspec.get_filesystem_class(proto)
    except ImportError as exc:
        raise CheckpointError(missing_package_message(uri, proto, str(exc))) from None
    except ValueError:
        raise CheckpointError(
            f"checkpoint location {uri}: unknown protocol {proto}://; use a local path or "
            "a URL fsspec knows (s3://, gs://, ...)"
        ) from None
    with contextlib.suppress(Exception):  # FSSPEC_<PROTOCOL>_<KWARG> set after fsspec loaded
        from fsspec.config import conf, set_conf_env

        set_conf_env(conf)
    fs, path = url_to_fs(uri, **(storage_options or {}))
    return FsspecFS(fs, proto), str(path).rstrip("/")
