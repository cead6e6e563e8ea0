"""The job's own secret key: it signs what the runtime says and seals what it stores.

Standard library only. A key is made with the job's payload (32 random
bytes) and reaches the workers as a private file (local: ``key`` in the job
directory, mode 0600; Kubernetes: a key of the payload Secret), named by
``DISTRAIN_KEY_FILE``; it is never put in the environment or a pod spec.

- :func:`sign` / :func:`verify`: HMAC-SHA256 over bytes (as Jupyter signs its
  messages with a per-connection key). Control lines, store values and
  session frames carry such a signature.
- :func:`seal` / :func:`unseal`: authenticated encryption for values that
  must not be read by others on the same machine (a session cell's captured
  values in the c10d store): a SHAKE-256 keystream derived from the key and a
  random nonce, then HMAC-SHA256 over nonce and ciphertext (encrypt-then-MAC).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from typing import Final

ENV_KEY_FILE: Final = "DISTRAIN_KEY_FILE"
#: The key's file name in a local job directory and in a Kubernetes payload Secret.
KEY_FILE: Final = "key"
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 16
TAG_BYTES: Final = 32

_lock = threading.Lock()
_cached: tuple[str, bytes] | None = None


class BadSignature(ValueError):
    """A signed value whose signature does not match (or that is too short to hold one)."""


def new_key() -> bytes:
    """A fresh job key."""
    return secrets.token_bytes(KEY_BYTES)


def load() -> bytes | None:
    """This worker's job key, from the file ``$DISTRAIN_KEY_FILE`` names; None without one.

    Read once per path and cached. A file that exists but cannot be read, or
    holds a key of the wrong length, raises: a worker must not run unsigned
    when its job has a key.
    """
    global _cached
    path = os.environ.get(ENV_KEY_FILE)
    if not path:
        return None
    with _lock:
        if _cached is not None and _cached[0] == path:
            return _cached[1]
        with open(path, "rb") as fh:
            key = fh.read()
        if len(key) != KEY_BYTES:
            raise ValueError(f"job key file {path} holds {len(key)} bytes, not {KEY_BYTES}")
        _cached = (path, key)
        return key


def sign(key: bytes, data: bytes) -> str:
    """The hex HMAC-SHA256 of ``data`` under ``key``."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def verify(key: bytes, data: bytes, signature: str) -> bool:
    """True when ``signature`` is :func:`sign` of ``data`` under ``key`` (constant time)."""
    return hmac.compare_digest(sign(key, data), signature)


class Signer:
    """:func:`sign` and :func:`verify` with one key, keyed once (for many short messages)."""

    __slots__ = ("_mac",)

    def __init__(self, key: bytes) -> None:
        self._mac = hmac.new(key, digestmod=hashlib.sha256)

    def sign(self, data: bytes) -> str:
        """The hex HMAC-SHA256 of ``data``."""
        mac = self._mac.copy()
        mac.update(data)
        return mac.hexdigest()

    def verify(self, data: bytes, signature: str) -> bool:
        """True when ``signature`` is :meth:`sign` of ``data`` (constant time)."""
        return hmac.compare_digest(self.sign(data), signature)


_signer: tuple[bytes, Signer] | None = None


def signer() -> Signer | None:
    """A :class:`Signer` of this worker's job key (:func:`load`), made once; None without a key."""
    global _signer
    key = load()
    if key is None:
        return None
    with _lock:
        if _signer is None or _signer[0] != key:
            _signer = (key, Signer(key))
        return _signer[1]


def signed(key: bytes, data: bytes) -> bytes:
    """``data`` with its binary signature in front (for store values and frames)."""
    return hmac.new(key, data, hashlib.sha256).digest() + data


def unsigned(key: bytes, blob: bytes) -> bytes:
    """The data of a :func:`signed` blob; :class:`BadSignature` unless ``key`` signed it."""
    if len(blob) < TAG_BYTES:
        raise BadSignature("signed value too short")
    tag, data = blob[:TAG_BYTES], blob[TAG_BYTES:]
    if not hmac.compare_digest(tag, hmac.new(key, data, hashlib.sha256).digest()):
        raise BadSignature("signature does not match the job key")
    return data


def _keystream(key: bytes, nonce: bytes, size: int) -> bytes:
    return hashlib.shake_256(b"distrain-seal\0" + key + nonce).digest(size)


def _xor(data: bytes, stream: bytes) -> bytes:
    if not data:
        return b""
    mixed = int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")
    return mixed.to_bytes(len(data), "little")


def seal(key: bytes, data: bytes) -> bytes:
    """``data`` encrypted and authenticated under ``key``: nonce + ciphertext + tag."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    body = nonce + _xor(data, _keystream(key, nonce, len(data)))
    return body + hmac.new(key, body, hashlib.sha256).digest()


def unseal(key: bytes, blob: bytes) -> bytes:
    """The data :func:`seal` sealed; :class:`BadSignature` unless ``key`` sealed ``blob``."""
    if len(blob) < NONCE_BYTES + TAG_BYTES:
        raise BadSignature("sealed value too short")
    body, tag = blob[:-TAG_BYTES], blob[-TAG_BYTES:]
    if not hmac.compare_digest(tag, hmac.new(key, body, hashlib.sha256).digest()):
        raise BadSignature("sealed value not sealed with the job key")
    nonce, cipher = body[:NONCE_BYTES], body[NONCE_BYTES:]
    return _xor(cipher, _keystream(key, nonce, len(cipher)))
