"""Kubeflow Trainer's status server (v2.2+, feature gate ``TrainJobStatus``): trainer pods
post their progress into ``status.trainerStatus`` of their TrainJob.

As upstream (``pkg/statusserver`` and the ``TrainJobStatus`` runtime plugin, read
from the public sources):

* **Pods**: every container of the trainer's replicated jobs gets
  ``KUBEFLOW_TRAINER_SERVER_URL`` (``https://kubeflow-trainer-controller-manager.
  kubeflow-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/
  trainjobs/<name>/status``), ``KUBEFLOW_TRAINER_SERVER_CA_CERT`` and
  ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (files under
  ``/var/run/secrets/kubeflow/trainer``), from a projected volume
  ``kubeflow-trainer-token``: a service account token with the audience
  ``trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status`` and
  the ``ca.crt`` of the ConfigMap ``<name>-tls-config`` the controller copies
  (owned by the TrainJob) from the webhook Secret ``kubeflow-trainer-webhook-cert``.
* **Server**: HTTPS with a certificate of a CA made when the emulator starts
  (``openssl``; the CA never leaves the emulator's root directory); only
  ``POST`` on that path (else 404, 405 for another method); the bearer token
  must be one the API server issued, unexpired, for that audience and from a
  pod of that namespace (else 403 ``Forbidden``); a body over 64 KiB is 413;
  a body that does not decode is 422 ``Invalid payload``; without
  ``trainerStatus`` the request is echoed (200) and nothing is written; else
  ``trainerStatus`` replaces the TrainJob's (server-side apply of the status
  subresource, field manager ``trainer-status``), validated as the CRD does
  (``progressPercentage`` 0-100, ``estimatedRemainingSeconds`` >= 0, at most 256
  metrics with a name and value of 1-64 characters, ``lastUpdatedTime``
  required: 422 with the API server's message); a missing TrainJob is 404
  ``Train job not found``. The answer echoes the request.
* **CRD**: ``status.trainerStatus`` in the schema and the ``Progress %`` printer
  column of KEP-2779 (``kubectl get trainjob``).

Services reach it as every Service does here: the kubelet rewrites the URL's
host and port to the local port this server listens on.
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .apiserver import ApiServer
from .loop import owner_ref
from .meta import ApiError, Obj, deep
from .resources import CONFIGMAPS, SECRETS, SERVICES, Resource
from .rewrite import Network
from .trainer import ANCESTOR_TRAINER
from .trainer_jobset import ancestor_of, pod_spec_of, upsert_env

NAMESPACE = "kubeflow-system"
SERVICE = "kubeflow-trainer-controller-manager"
SECRET = "kubeflow-trainer-webhook-cert"
PORT = 10443
MOUNT = "/var/run/secrets/kubeflow/trainer"
VOLUME = "kubeflow-trainer-token"
MAX_BODY = 1 << 16
FIELD_MANAGER = "trainer-status"
_PATH = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/(?P<ns>[^/]+)/trainjobs/(?P<name>[^/]+)"
    r"/status$"
)

TRAINER_STATUS_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "progressPercentage": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100},
        "estimatedRemainingSeconds": {"type": "integer", "format": "int32", "minimum": 0},
        "metrics": {
            "type": "array",
            "maxItems": 256,
            "x-kubernetes-list-type": "atomic",
            "items": {
                "type": "object",
                "required": ["name", "value"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 64},
                    "value": {"type": "string", "minLength": 1, "maxLength": 64},
                },
            },
        },
        "lastUpdatedTime": {"type": "string", "format": "date-time"},
    },
}
PRINTER_COLUMN: Obj = {
    "name": "Progress %",
    "type": "integer",
    "jsonPath": ".status.trainerStatus.progressPercentage",
}


def status_path(namespace: str, name: str) -> str:
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def audience(namespace: str, name: str) -> str:
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def with_trainer_status(crd: Obj) -> Obj:
    """The TrainJob CRD with ``status.trainerStatus`` and the ``Progress %`` column."""
    out = deep(crd)
    for version in out["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        status.setdefault("properties", {})["trainerStatus"] = deep(TRAINER_STATUS_SCHEMA)
        columns = version.setdefault("additionalPrinterColumns", [])
        at = next((i for i, c in enumerate(columns) if c.get("name") == "Age"), len(columns))
        columns.insert(at, deep(PRINTER_COLUMN))
    return out


def make_certificates(directory: Path) -> dict[str, bytes]:
    """A test CA and a server certificate for the Service and 127.0.0.1: ca.crt, tls.crt,
    tls.key (PEM)."""
    directory.mkdir(parents=True, exist_ok=True)
    ext = directory / "server.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
        f"subjectAltName=IP:127.0.0.1,DNS:{SERVICE}.{NAMESPACE}.svc\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = [
        [
            "openssl",
            "req",
            "-x509",
            *ec,
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=k8s-emulator-trainer-ca",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        [
            "openssl",
            "req",
            *ec,
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            f"/CN={SERVICE}.{NAMESPACE}.svc",
        ],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    ]
    for args in run:
        subprocess.run(args, cwd=directory, check=True, capture_output=True)
    return {name: (directory / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}


class _Refused(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _check(ts: Any) -> list[str]:
    """What the CRD's schema and CEL rule refuse in ``trainerStatus`` (API server wording)."""
    if not isinstance(ts, dict):
        return []
    out: list[str] = []
    field = "status.trainerStatus"
    pct, eta = ts.get("progressPercentage"), ts.get("estimatedRemainingSeconds")
    if isinstance(pct, int) and not 0 <= pct <= 100:
        bound = "less than or equal to 100" if pct > 100 else "greater than or equal to 0"
        out.append(
            f"{field}.progressPercentage: Invalid value: {pct}: "
            f"{field}.progressPercentage in body should be {bound}"
        )
    if isinstance(eta, int) and eta < 0:
        name = f"{field}.estimatedRemainingSeconds"
        out.append(
            f"{name}: Invalid value: {eta}: {name} in body should be greater than or equal to 0"
        )
    metrics = ts.get("metrics") or []
    if len(metrics) > 256:
        out.append(f"{field}.metrics: Too many: {len(metrics)}: must have at most 256 items")
    for i, metric in enumerate(metrics):
        for key in ("name", "value"):
            text = metric.get(key, "")
            if not 1 <= len(text) <= 64:
                out.append(
                    f"{field}.metrics[{i}].{key}: Invalid value: {json.dumps(text)}: "
                    "must be 1 to 64 characters"
                )
    if not ts.get("lastUpdatedTime"):
        out.append(
            f'{field}: Invalid value: "object": lastUpdatedTime is required when '
            "trainerStatus is present"
        )
    return out


def _decode(body: bytes) -> dict[str, Any]:
    """The request as Go's decoder reads it into ``UpdateTrainJobStatusRequest``."""
    try:
        request = json.loads(body)
    except ValueError:
        raise _Refused(422, "Invalid", "Invalid payload") from None
    if not isinstance(request, dict):
        raise _Refused(422, "Invalid", "Invalid payload")
    ts = request.get("trainerStatus")
    if ts is None:
        return {}
    ok = isinstance(ts, dict)
    if ok:
        for key in ("progressPercentage", "estimatedRemainingSeconds"):
            value = ts.get(key)
            ok = ok and (value is None or (isinstance(value, int) and not isinstance(value, bool)))
        metrics = ts.get("metrics")
        ok = ok and (metrics is None or isinstance(metrics, list))
        for metric in metrics or []:
            ok = ok and isinstance(metric, dict)
            ok = ok and all(isinstance(metric.get(k, ""), str) for k in ("name", "value"))
        ok = ok and isinstance(ts.get("lastUpdatedTime") or "", str)
    if not ok:
        raise _Refused(422, "Invalid", "Invalid payload")
    kept = {k: ts[k] for k in TRAINER_STATUS_SCHEMA["properties"] if ts.get(k) is not None}
    if "metrics" in kept:
        kept["metrics"] = [
            {"name": m.get("name", ""), "value": m.get("value", "")} for m in kept["metrics"]
        ]
    return {"trainerStatus": kept}


class StatusServer:
    """The controller manager's status endpoint, its CA and its runtime plugin."""

    def __init__(self, api: ApiServer, trainjobs: Resource, network: Network, root: Path) -> None:
        self.api, self.trainjobs, self.network, self.root = api, trainjobs, network, root
        self.port = 0
        #: Every request answered: (namespace, TrainJob, HTTP code).
        self.requests: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._pod_server: http.server.ThreadingHTTPServer | None = None
        self._ca = b""

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        files = make_certificates(self.root / "trainer-status-tls")
        self._ca = files["ca.crt"]
        self.api.ensure_namespace(NAMESPACE)
        data = {name: base64.b64encode(value).decode() for name, value in files.items()}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}, "data": data}
        self.api.create(SECRETS, NAMESPACE, secret)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE},
            "spec": {"ports": [{"name": "status", "port": PORT, "targetPort": PORT}]},
        }
        self.api.create(SERVICES, NAMESPACE, service)
        self.port = self.network.local_port(NAMESPACE, SERVICE, PORT)
        context = self._context()
        handler = type("Handler", (_Handler,), {"owner": self})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(
            target=self._server.serve_forever, name="trainer-status-server", daemon=True
        ).start()

    def serve_on(self, listen: Callable[[int], socket.socket]) -> str:
        """Also serve on the pod network: ``listen(PORT)`` gives a bound socket (the address
        the Service's name resolves to in pods, returned)."""
        sock = listen(PORT)
        address = str(sock.getsockname()[0])
        handler = type("Handler", (_Handler,), {"owner": self})
        server = http.server.ThreadingHTTPServer(sock.getsockname(), handler, False)
        server.socket.close()
        server.socket, server.daemon_threads = sock, True
        server.server_activate()
        server.socket = self._context().wrap_socket(server.socket, server_side=True)
        self._pod_server = server
        threading.Thread(
            target=server.serve_forever, name="trainer-status-pods", daemon=True
        ).start()
        return address

    def _context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls = self.root / "trainer-status-tls"
        context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
        return context

    def close(self) -> None:
        for server in (self._server, self._pod_server):
            if server is not None:
                server.shutdown()
                server.server_close()
        self._server = self._pod_server = None

    def posts(self, name: str, namespace: str = "default") -> list[int]:
        """The HTTP codes of the requests about TrainJob ``name``."""
        with self._lock:
            return [code for ns, job, code in self.requests if (ns, job) == (namespace, name)]

    # --- the TrainJobStatus runtime plugin ---------------------------------------------------

    def enforce(self, trainjob: Obj, jobset: Obj) -> None:
        """Give the trainer's containers the endpoint, and create its CA ConfigMap."""
        meta = trainjob["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        url = f"https://{SERVICE}.{NAMESPACE}.svc:{PORT}{status_path(namespace, name)}"
        env = [
            {"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": url},
            {"name": "KUBEFLOW_TRAINER_SERVER_CA_CERT", "value": f"{MOUNT}/ca.crt"},
            {"name": "KUBEFLOW_TRAINER_SERVER_TOKEN", "value": f"{MOUNT}/token"},
        ]
        volume = {
            "name": VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": audience(namespace, name),
                            "expirationSeconds": 3600,
                            "path": "token",
                        }
                    },
                    {
                        "configMap": {
                            "name": f"{name}-tls-config",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                ]
            },
        }
        for rjob in jobset["spec"].get("replicatedJobs", []):
            if ancestor_of(rjob) != ANCESTOR_TRAINER:
                continue
            spec = pod_spec_of(rjob)
            for container in spec.get("containers", []):
                upsert_env(container.setdefault("env", []), *env)
                mounts = [m for m in container.get("volumeMounts", []) if m["name"] != VOLUME]
                container["volumeMounts"] = [
                    *mounts,
                    {"name": VOLUME, "mountPath": MOUNT, "readOnly": True},
                ]
            spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] != VOLUME]
            spec["volumes"].append(volume)
        config = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-tls-config", "ownerReferences": [owner_ref(trainjob)]},
            "data": {"ca.crt": self._webhook_ca()},
        }
        try:
            self.api.create(CONFIGMAPS, namespace, config)
        except ApiError as exc:
            if exc.code != 409:
                raise

    def _webhook_ca(self) -> str:
        secret = self.api.store.get(SECRETS.key, NAMESPACE, SECRET)
        if secret is None or not (secret.get("data") or {}).get("ca.crt"):
            raise ApiError(500, "InternalError", "failed to look up status server tls secret")
        return base64.b64decode(secret["data"]["ca.crt"]).decode()

    # --- the endpoint -----------------------------------------------------------------------

    def answer(self, method: str, path: str, auth: str, body: bytes) -> tuple[int, Obj]:
        """The (code, JSON body) for one request."""
        match = _PATH.match(path.split("?")[0])
        if match is None:
            return _status(404, "NotFound", "Not found")
        if method != "POST":
            return 405, {}
        namespace, name = match["ns"], match["name"]
        try:
            code, out = self._apply(namespace, name, auth, body)
        except _Refused as exc:
            code, out = _status(exc.code, exc.reason, exc.message)
        with self._lock:
            self.requests.append((namespace, name, code))
        return code, out

    def _apply(self, namespace: str, name: str, auth: str, body: bytes) -> tuple[int, Obj]:
        parts = auth.split()
        token = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else ""
        claims = self.api.tokens.review(token) if token else None
        pod_ns = ((claims or {}).get("kubernetes.io") or {}).get("namespace")
        if claims is None or audience(namespace, name) not in claims.get("aud", []):
            raise _Refused(403, "Forbidden", "Forbidden")
        if pod_ns != namespace:
            raise _Refused(403, "Forbidden", "Forbidden")
        if len(body) > MAX_BODY:
            raise _Refused(413, "RequestEntityTooLarge", "Request body too large")
        request = _decode(body)
        if not request:
            return 200, {}
        ts = request["trainerStatus"]
        errors = _check(ts)
        if errors:
            message = f'TrainJob.trainer.kubeflow.org "{name}" is invalid: ' + ", ".join(errors)
            raise _Refused(422, "Invalid", message)

        def write(obj: Obj) -> None:
            obj.setdefault("status", {})["trainerStatus"] = deep(ts)

        if self.api.mutate(self.trainjobs, namespace, name, write) is None:
            raise _Refused(404, "NotFound", "Train job not found")
        return 200, request


def _status(code: int, reason: str, message: str) -> tuple[int, Obj]:
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    owner: StatusServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, MAX_BODY + 1)) if length else b""
        if length > MAX_BODY:
            self.close_connection = True  # the rest is not read
        code, out = self.owner.answer(
            self.command, self.path, self.headers.get("Authorization", ""), body
        )
        data = json.dumps(out).encode() + b"\n"
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: object) -> None:
        return
