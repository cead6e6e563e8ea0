"""moto's S3 server on 127.0.0.1 for tests: ``s3``, module-scoped, with an empty store."""

from __future__ import annotations

import os
import socket
import urllib.request
from collections.abc import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """moto's S3 server on 127.0.0.1, credentials for it, and fsspec's settings as env vars."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # Every moto server in a process shares one store: start each module from an empty one.
    reset = urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset, timeout=30).close()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "FSSPEC_S3_KEY": "testing",
        "FSSPEC_S3_SECRET": "testing",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(
        endpoint_url=env["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing"
    )
    fs.mkdir("ckpt-bucket")
    try:
        yield env
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        s3fs.S3FileSystem.clear_instance_cache()
        from fsspec.config import conf

        conf.pop("s3", None)
