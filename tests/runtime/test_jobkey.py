"""The job key: one subkey per use, so nothing made for one use verifies for another."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from jupyter_disttrain.runtime import jobkey
from jupyter_disttrain.runtime.protocol import signed_body

KEY = bytes(range(32))
DATA = b'{"store":"value"}'


def test_subkeys_differ_per_use_and_from_the_job_key() -> None:
    keys = {use: jobkey.subkey(KEY, use) for use in ("line", "seal", "seal-mac", *jobkey.PURPOSES)}
    assert len(set(keys.values())) == len(keys)
    assert KEY not in keys.values()
    assert all(len(k) == 32 for k in keys.values())
    assert jobkey.subkey(KEY, "line") == jobkey.subkey(bytes(range(32)), "line")  # deterministic


@pytest.mark.parametrize("made_for", jobkey.PURPOSES)
def test_a_value_signed_for_one_purpose_verifies_for_it_alone(made_for: jobkey.Purpose) -> None:
    blob = jobkey.signed(KEY, DATA, purpose=made_for)
    assert jobkey.unsigned(KEY, blob, purpose=made_for) == DATA
    for other in jobkey.PURPOSES:
        if other != made_for:
            with pytest.raises(jobkey.BadSignature):
                jobkey.unsigned(KEY, blob, purpose=other)


@pytest.mark.parametrize("purpose", jobkey.PURPOSES)
def test_a_sealed_blob_reordered_as_tag_and_body_is_refused(purpose: jobkey.Purpose) -> None:
    sealed = jobkey.seal(KEY, DATA)
    body, tag = sealed[: -jobkey.TAG_BYTES], sealed[-jobkey.TAG_BYTES :]
    with pytest.raises(jobkey.BadSignature):
        jobkey.unsigned(KEY, tag + body, purpose=purpose)
    assert jobkey.unseal(KEY, sealed) == DATA


def test_a_signed_value_is_not_a_sealed_one_nor_a_line_signature() -> None:
    blob = jobkey.signed(KEY, DATA, purpose="store")
    with pytest.raises(jobkey.BadSignature):
        jobkey.unseal(KEY, blob)
    tag = blob[: jobkey.TAG_BYTES].hex()
    assert not jobkey.verify(KEY, DATA, tag)
    # a line signed with the whole job key (the old, single-purpose form) is not believed
    raw = hmac.new(KEY, DATA, hashlib.sha256).hexdigest()
    assert not jobkey.verify(KEY, DATA, raw) and jobkey.verify(KEY, DATA, jobkey.sign(KEY, DATA))


@pytest.mark.parametrize(
    "signature",
    [
        *("é" * 64, "A" * 64, "g" * 64, "a" * 63, "a" * 65, ""),
        *("\ud800" * 64, "\u0660" * 64, b"\xff" * 64),
    ],
)
def test_anything_but_64_lowercase_hex_digits_is_no_signature(signature: str | bytes) -> None:
    assert not jobkey.is_signature(signature)
    assert not jobkey.verify(KEY, DATA, signature)  # compared as bytes, never raises


def test_signed_body_takes_any_text() -> None:
    signer = jobkey.Signer(KEY)
    body = '{"v":1,"kind":"done","rank":1,"t":1,"seconds":1}'
    good = f"##distrain {body} {signer.sign(body.encode())}"
    assert signed_body(good, signer) == body
    assert signed_body(good.replace('"t":1', '"t":"\ud800"'), signer) is None
    assert signed_body(f"##distrain {body} " + "é" * 64, signer) is None
    assert signed_body("##distrain \ud800 " + "a" * 64, signer) is None
