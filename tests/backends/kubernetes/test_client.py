"""The client module: the client package loads on first use only; errors are said in words."""

from __future__ import annotations

import subprocess
import sys

from jupyter_disttrain.backends.kubernetes.client import api_error, error_words

LOADED_AFTER_IMPORT = """
import sys
import jupyter_disttrain.magics
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.options import declared_options
assert "image" in declared_options()  # the Kubernetes backend's options are declared
print(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")))
"""


def test_the_magics_and_the_backends_options_load_without_the_client_package() -> None:
    """``%load_ext`` stays light: half a second of client import waits for the first API call."""
    out = subprocess.run(
        [sys.executable, "-c", LOADED_AFTER_IMPORT], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_api_error_is_the_clients_exception_class() -> None:
    from kubernetes.client.exceptions import ApiException

    assert api_error() is ApiException
    try:
        raise ApiException(status=404, reason="Not Found")
    except api_error() as exc:
        assert exc.status == 404


def test_error_words_read_as_sentences_not_reprs() -> None:
    """What a follower's thread says when it stops: the product's own error as its message,
    the API server's answer as status and reason, any other error with its type's name."""
    from kubernetes.client.exceptions import ApiException

    from jupyter_disttrain.backends.kubernetes.podlogs import LogReadTimeout

    given_up = LogReadTimeout("the API server sent nothing of pod p-0's log for 10 s a try")
    assert error_words(given_up) == "the API server sent nothing of pod p-0's log for 10 s a try"
    answer = ApiException(status=403, reason="Forbidden")
    assert error_words(answer) == "the API server answered 403 Forbidden"
    assert error_words(KeyError("status")) == "KeyError: 'status'"
