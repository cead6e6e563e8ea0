"""The job's own secret key: it signs what the runtime says and seals what it stores.

Standard library only. A key is made with the job's payload (32 random
bytes) and reaches the workers as a private file (local: ``key`` in the job
directory, mode 0600; Kubernetes: a key of the payload Secret), named by
``DISTRAIN_KEY_FILE``; it is never put in the environment or a pod spec.

Every use has a key of its own, derived from the job key (:func:`subkey`,
HKDF-Expand with SHA-256 and the use's name as its info), so that what was
made for one use never verifies for another (a sealed blob read as a signed
store value, a debugger frame replayed as a session frame):

- :func:`sign` / :func:`verify` / :class:`Signer`: the hex HMAC-SHA256 of a
  control line (as Jupyter signs its messages with a per-connection key),
  under the ``line`` subkey.
- :func:`signed` / :func:`unsigned`: a binary HMAC-SHA256 tag in front of
  bytes, under the subkey of the ``purpose`` named (:data:`PURPOSES`: store
  values, session frames, debugger frames).
- :func:`seal` / :func:`unseal`: authenticated encryption for values that
  must not be read by others on the same machine (a session cell's captured
  values in the c10d store): a SHAKE-256 keystream from the ``seal`` subkey
  and a random nonce, then HMAC-SHA256 over nonce and ciphertext
  (encrypt-then-MAC), under the ``seal-mac`` subkey.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from functools import lru_cache
from typing import Final, Literal

ENV_KEY_FILE: Final = "DISTRAIN_KEY_FILE"
#: The key's file name in a local job directory and in a Kubernetes payload Secret.
KEY_FILE: Final = "key"
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 16
TAG_BYTES: Final = 32
#: Length of a line signature: hex SHA-256.
SIGNATURE_CHARS: Final = 64
_HEX: Final = frozenset(b"0123456789abcdef")

#: What a :func:`signed` blob is for; each has its own subkey.
Purpose = Literal["store", "session", "debugger", "control"]
PURPOSES: Final = ("store", "session", "debugger", "control")

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


@lru_cache(maxsize=64)
def subkey(key: bytes, use: str) -> bytes:
    """The key of one ``use`` of job key ``key``: HKDF-Expand (RFC 5869) with SHA-256, the
    job key as the pseudorandom key and ``jupyter_disttrain/USE`` as the info, 32 bytes."""
    info = b"jupyter_disttrain/" + use.encode("ascii")
    return hmac.new(key, info + b"\x01", hashlib.sha256).digest()


def is_signature(signature: str | bytes) -> bool:
    """True when ``signature`` has the form of a line signature: 64 lowercase hex digits."""
    data = signature.encode("ascii", "replace") if isinstance(signature, str) else signature
    return len(data) == SIGNATURE_CHARS and _HEX.issuperset(data)


def sign(key: bytes, data: bytes) -> str:
    """The hex HMAC-SHA256 of line ``data`` under ``key``'s ``line`` subkey."""
    return hmac.new(subkey(key, "line"), data, hashlib.sha256).hexdigest()


def verify(key: bytes, data: bytes, signature: str | bytes) -> bool:
    """True when ``signature`` is :func:`sign` of ``data`` under ``key`` (constant time).

    Any text is accepted and compared as bytes: what is not 64 lowercase hex
    digits is simply not a signature.
    """
    return Signer(key).verify(data, signature)


class Signer:
    """:func:`sign` and :func:`verify` with one key, keyed once (for many short lines)."""

    __slots__ = ("_mac",)

    def __init__(self, key: bytes) -> None:
        self._mac = hmac.new(subkey(key, "line"), digestmod=hashlib.sha256)

    def sign(self, data: bytes) -> str:
        """The hex HMAC-SHA256 of ``data``."""
        mac = self._mac.copy()
        mac.update(data)
        return mac.hexdigest()

    def verify(self, data: bytes, signature: str | bytes) -> bool:
        """True when ``signature`` is :meth:`sign` of ``data`` (constant time, as bytes)."""
        if not is_signature(signature):
            return False
        given = signature.encode("ascii") if isinstance(signature, str) else signature
        return hmac.compare_digest(self.sign(data).encode("ascii"), given)


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


def signed(key: bytes, data: bytes, *, purpose: Purpose) -> bytes:
    """``data`` with its binary signature for ``purpose`` in front (store values, frames)."""
    return hmac.new(subkey(key, purpose), data, hashlib.sha256).digest() + data


def unsigned(key: bytes, blob: bytes, *, purpose: Purpose) -> bytes:
    """The data of a :func:`signed` blob; :class:`BadSignature` unless ``key`` signed it for
    ``purpose``."""
    if len(blob) < TAG_BYTES:
        raise BadSignature("signed value too short")
    tag, data = blob[:TAG_BYTES], blob[TAG_BYTES:]
    if not hmac.compare_digest(tag, hmac.new(subkey(key, purpose), data, hashlib.sha256).digest()):
        raise BadSignature(f"signature does not match the job key ({purpose})")
    return data


def _keystream(key: bytes, nonce: bytes, size: int) -> bytes:
    return hashlib.shake_256(subkey(key, "seal") + nonce).digest(size)


def _xor(data: bytes, stream: bytes) -> bytes:
    if not data:
        return b""
    mixed = int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")
    return mixed.to_bytes(len(data), "little")


def seal(key: bytes, data: bytes) -> bytes:
    """``data`` encrypted and authenticated under ``key``: nonce + ciphertext + tag."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    body = nonce + _xor(data, _keystream(key, nonce, len(data)))
    return body + hmac.new(subkey(key, "seal-mac"), body, hashlib.sha256).digest()


def unseal(key: bytes, blob: bytes) -> bytes:
    """The data :func:`seal` sealed; :class:`BadSignature` unless ``key`` sealed ``blob``."""
    if len(blob) < NONCE_BYTES + TAG_BYTES:
        raise BadSignature("sealed value too short")
    body, tag = blob[:-TAG_BYTES], blob[-TAG_BYTES:]
    if not hmac.compare_digest(
        tag, hmac.new(subkey(key, "seal-mac"), body, hashlib.sha256).digest()
    ):
        raise BadSignature("sealed value not sealed with the job key")
    nonce, cipher = body[:NONCE_BYTES], body[NONCE_BYTES:]
    return _xor(cipher, _keystream(key, nonce, len(cipher)))
