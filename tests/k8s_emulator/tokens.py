"""Service account tokens for projected volumes (the API server's TokenRequest and TokenReview).

A token is a JWT (HS256 under a key of this emulator) carrying the claims a
real bound token carries: ``aud`` (the audiences asked for), ``exp``, ``iat``,
``iss``, ``sub`` (``system:serviceaccount:<ns>:<account>``) and
``kubernetes.io`` (namespace, pod name and uid, service account). The kubelet
asks for one per ``serviceAccountToken`` projection; :meth:`TokenIssuer.review`
is what a TokenReview answers: the claims of a token this emulator issued and
that has not expired, else None.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

from .meta import Obj

ISSUER = "https://kubernetes.default.svc.cluster.local"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    """Issues and reviews bound service account tokens."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        #: Tokens issued so far (the kubelet asks again for each pod it mounts).
        self.issued = 0

    def issue(self, pod: Obj, audience: str, expiry: int = 3600) -> str:
        meta = pod["metadata"]
        namespace = meta.get("namespace", "default")
        account = pod.get("spec", {}).get("serviceAccountName") or "default"
        now = int(time.time())
        claims = {
            "aud": [audience],
            "exp": now + max(int(expiry), 600),
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "sub": f"system:serviceaccount:{namespace}:{account}",
            "kubernetes.io": {
                "namespace": namespace,
                "pod": {"name": meta.get("name", ""), "uid": meta.get("uid", "")},
                "serviceaccount": {"name": account},
            },
        }
        head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signature = hmac.new(self._key, f"{head}.{body}".encode(), hashlib.sha256).digest()
        self.issued += 1
        return f"{head}.{body}.{_b64(signature)}"

    def review(self, token: str) -> dict[str, Any] | None:
        """The claims of ``token`` when this emulator issued it and it is still valid."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        signing = f"{parts[0]}.{parts[1]}".encode()
        try:
            expected = hmac.new(self._key, signing, hashlib.sha256).digest()
            if not hmac.compare_digest(expected, _unb64(parts[2])):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, TypeError):
            return None
        if not isinstance(claims, dict) or int(claims.get("exp", 0)) < time.time():
            return None
        return claims
