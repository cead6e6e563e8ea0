"""How a pod's command, arguments and environment are adapted to run on this one host.

* ``$(VAR)`` references are expanded as the kubelet does (``$$`` is a literal ``$``).
* **Paths**: every occurrence of a volume's ``mountPath`` (as a whole path
  prefix) becomes the directory the emulator materialised for it.
* **Hosts**: a Service name in any of its DNS forms (``name``, ``name.ns``,
  ``name.ns.svc``, ``name.ns.svc.cluster.local``), a pod's name under a
  headless Service (``hostname.service`` and the same longer forms, as a
  JobSet's pods are reached: ``job-node-0-0.job``), and any ``*.ns.svc`` name,
  becomes ``127.0.0.1``.
* **Ports**: all pods share one host, so each (namespace, Service, port) gets
  its own free local port (and each pod name under a headless Service, each of
  its ports). ``host:port`` after a Service name is rewritten, and so is a bare
  number in a variable named ``<P>PORT`` when ``<P>ADDR``, ``<P>HOST`` or
  ``<P>ADDRESS`` names a Service or such a pod (``MASTER_PORT`` with
  ``MASTER_ADDR``, ``PET_MASTER_PORT`` with ``PET_MASTER_ADDR``).
"""

from __future__ import annotations

import random
import re
import socket
import threading
from collections.abc import Callable, Iterable, Mapping

from tests.ports import emulator_ports

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_PATH_CHARS = r"[\w.-]"


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubelet variable expansion: ``$(NAME)`` from ``env``; unknown names stay as written."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(sub, value)


def path_rewriter(mounts: Iterable[tuple[str, str]]) -> Callable[[str], str]:
    """A function replacing each mount path prefix (longest first) by its local directory."""
    table = sorted(((m.rstrip("/") or "/", d) for m, d in mounts), key=lambda m: -len(m[0]))
    if not table:
        return lambda text: text
    pattern = re.compile(
        rf"(?<!{_PATH_CHARS})(?<!/)("
        + "|".join(re.escape(mount) for mount, _ in table)
        + rf")(?!{_PATH_CHARS})"
    )
    lookup = dict(table)
    return lambda text: pattern.sub(lambda m: lookup[m.group(1)], text)


def port_range() -> tuple[int, int]:
    """The ports this process's emulators hand out, ``[start, end)``: below the ephemeral
    range, and a part of its own for each pytest-xdist worker, apart from the local jobs'
    (:mod:`tests.ports`)."""
    ports = emulator_ports()
    return ports.start, ports.stop


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(taken: set[int]) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now and the emulator has not handed out.

    It lies outside the kernel's ephemeral range when it can: a port from that
    range (what binding port 0 gives) may be handed to any outgoing connection
    of this busy host before the pod listens on it, and the pod's listen then
    fails (EADDRINUSE) only sometimes.
    """
    start, end = port_range()
    if end - start >= 1000:
        for _ in range(200):
            port = random.randrange(start, end)
            if port not in taken and _bindable(port):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


class Network:
    """Cluster DNS and Service ports, flattened onto 127.0.0.1."""

    def __init__(
        self,
        services: Callable[[str], set[str]],
        headless: Callable[[str], set[str]] | None = None,
    ) -> None:
        #: Service names in a namespace (looked up on every rewrite).
        self._services = services
        #: The headless ones among them (pods under them have DNS names).
        self._headless = headless or (lambda namespace: set())
        self._lock = threading.Lock()
        self._ports: dict[tuple[str, str, int], int] = {}

    def local_port(self, namespace: str, service: str, port: int) -> int:
        """The local port standing for ``service:port`` (allocated on first use)."""
        with self._lock:
            key = (namespace, service, port)
            if key not in self._ports:
                self._ports[key] = free_port(set(self._ports.values()))
            return self._ports[key]

    def allocated(self, namespace: str, service: str, port: int) -> int | None:
        """The local port standing for ``service:port`` if one was handed out, else None."""
        with self._lock:
            return self._ports.get((namespace, service, port))

    def release(self, namespace: str, service: str) -> None:
        with self._lock:
            for key in [
                k
                for k in self._ports
                if k[0] == namespace and (k[1] == service or k[1].endswith(f".{service}"))
            ]:
                del self._ports[key]

    def _pattern(self, names: set[str], headless: set[str] | None = None) -> re.Pattern[str]:
        label = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
        known = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        forms = [rf"{label}\.{label}\.svc(?:\.cluster\.local)?"]
        if known:
            forms.insert(0, rf"(?:{known})(?:\.{label}(?:\.svc(?:\.cluster\.local)?)?)?")
        subdomains = "|".join(re.escape(n) for n in sorted(headless or (), key=len, reverse=True))
        if subdomains:
            pod = rf"{label}\.(?:{subdomains})(?:\.{label}(?:\.svc(?:\.cluster\.local)?)?)?"
            forms.insert(0, pod)
        return re.compile(
            rf"(?:(?<=//)|(?<![\w./-]))(?P<host>{'|'.join(forms)})(?::(?P<port>\d+))?(?![\w.-])"
        )

    def _service(
        self, namespace: str, host: str, names: set[str], headless: set[str] | None = None
    ) -> tuple[str, str] | None:
        """(namespace, service) that ``host`` names, if it is a known Service; for a pod
        under a headless Service, (namespace, ``hostname.service``)."""
        parts = host.split(".")
        if len(parts) > 1 and parts[0] not in names:
            ns = parts[2] if len(parts) > 2 and parts[2] != "svc" else namespace
            subdomains = (
                headless if ns == namespace and headless is not None else self._headless(ns)
            )
            if parts[1] in subdomains:
                return ns, f"{parts[0]}.{parts[1]}"
        ns = parts[1] if len(parts) > 1 else namespace
        if ns == namespace and parts[0] in names:
            return ns, parts[0]
        if ns != namespace and parts[0] in self._services(ns):
            return ns, parts[0]
        return None

    def rewrite(self, namespace: str, text: str) -> str:
        """``text`` with Service host names (and their ports) made local."""
        names = self._services(namespace)
        headless = self._headless(namespace)
        pattern = self._pattern(names, headless)

        def sub(match: re.Match[str]) -> str:
            port = match.group("port")
            if port is None:
                return "127.0.0.1"
            service = self._service(namespace, match.group("host"), names, headless)
            if service is None:
                return f"127.0.0.1:{port}"
            return f"127.0.0.1:{self.local_port(*service, int(port))}"

        return pattern.sub(sub, text)

    def rewrite_env(self, namespace: str, env: Mapping[str, str]) -> dict[str, str]:
        """The environment with hosts and ports made local (see the module docstring)."""
        names = self._services(namespace)
        headless = self._headless(namespace)
        pattern = self._pattern(names, headless)
        out = {name: self.rewrite(namespace, value) for name, value in env.items()}
        for name, value in env.items():
            if not name.endswith("PORT") or not value.isdigit():
                continue
            prefix = name[: -len("PORT")]
            for partner in (f"{prefix}ADDR", f"{prefix}HOST", f"{prefix}ADDRESS"):
                host = env.get(partner, "")
                match = pattern.fullmatch(host)
                service = self._service(namespace, host, names, headless) if match else None
                if service is not None:
                    out[name] = str(self.local_port(*service, int(value)))
                    break
        return out
