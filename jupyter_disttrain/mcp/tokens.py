"""Plan tokens: a run names the very plan an agent was shown, and only for a while.

A token is ``ID.EXPIRY.MAC`` where MAC is an HMAC-SHA256, with a secret made per
server, over the id, the expiry and the plan's printed text. :class:`PlanTokens`
keeps the plans it issued; :meth:`PlanTokens.redeem` returns a plan only for a
token it issued, unexpired, whose plan still prints the same text, once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import Plan

#: How long a preview's token is good for, in seconds.
TOKEN_TTL = 600.0


class TokenError(ValueError):
    """A run's token is missing, unknown, expired, used, or not for this plan."""


def sign(secret: bytes, token_id: str, expiry: int, text: str) -> str:
    """The MAC binding ``token_id`` and ``expiry`` to a plan's printed ``text``."""
    message = f"{token_id}\n{expiry}\n{text}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


@dataclass
class _Issued:
    plan: Plan
    text: str
    expiry: int


class PlanTokens:
    """Tokens this server issued for previews, redeemable once each before they expire."""

    def __init__(self, ttl: float = TOKEN_TTL, clock: Callable[[], float] = time.time) -> None:
        self.ttl = ttl
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._issued: dict[str, _Issued] = {}
        self._lock = threading.Lock()

    def issue(self, plan: Plan) -> str:
        """A token for ``plan`` as printed now (``str(plan)``)."""
        text = str(plan)
        token_id = secrets.token_hex(8)
        expiry = int(self._clock() + self.ttl)
        with self._lock:
            self._drop_expired()
            self._issued[token_id] = _Issued(plan, text, expiry)
        return f"{token_id}.{expiry}.{sign(self._secret, token_id, expiry, text)}"

    def redeem(self, token: str) -> Plan:
        """The plan ``token`` was issued for; raises :class:`TokenError` naming what is wrong."""
        if not token:
            raise TokenError(_HOW)
        parts = token.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            raise TokenError(
                f"plan_token {token!r} is not a token from plan_cell/plan_script; {_HOW}"
            )
        token_id, expiry_text, mac = parts
        expiry = int(expiry_text)
        with self._lock:
            issued = self._issued.get(token_id)
            if issued is None:
                raise TokenError(f"plan_token was not issued by this server or was used; {_HOW}")
            expected = sign(self._secret, token_id, expiry, issued.text)
            if not hmac.compare_digest(expected, mac):
                raise TokenError(f"plan_token does not match the plan it names; {_HOW}")
            if self._clock() > expiry:
                del self._issued[token_id]
                raise TokenError(f"plan_token expired ({self.ttl:.0f} s after its preview); {_HOW}")
            if str(issued.plan) != issued.text:
                raise TokenError(f"the plan changed since its preview; {_HOW}")
            del self._issued[token_id]
        return issued.plan

    def _drop_expired(self) -> None:
        now = self._clock()
        for token_id, issued in list(self._issued.items()):
            if now > issued.expiry:
                del self._issued[token_id]
        if len(self._issued) > 256:  # a bounded memory of previews: the oldest go
            for token_id in list(self._issued)[: len(self._issued) - 256]:
                del self._issued[token_id]


_HOW = "call plan_cell or plan_script first and pass the plan_token it returns"
