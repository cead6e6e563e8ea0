"""The ``/etc/hosts`` of a pod on the pod network: the kubelet's file plus cluster DNS records.

The kubelet writes a pod's hosts file (``Kubernetes-managed hosts file.``,
localhost, the IPv6 lines, and the pod's own address with its FQDN
``hostname.subdomain.<ns>.svc.cluster.local`` when it has a subdomain, then
its host name). There is no cluster DNS server here, so the records CoreDNS
would answer follow in the same file, for the pod's namespace and every
other:

* a Service with a selector: ``name``, ``name.<ns>``, ``name.<ns>.svc`` and
  ``name.<ns>.svc.cluster.local`` give the address of each selected pod that
  has one (a headless Service's records; a ClusterIP Service has no virtual
  address here, so its name gives the pods' addresses too);
* a pod with ``hostname`` and ``subdomain`` naming a headless Service:
  ``hostname.subdomain`` and its longer forms (how JobSet's pods are reached:
  ``job-node-0-0.job``), as ``publishNotReadyAddresses`` makes them;
* a Service the emulator serves itself (the Trainer's status server): its
  names give the address the emulator listens on.

The short forms stand for the search path ``<ns>.svc.cluster.local``, so they
are written only for the pod's own namespace.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from .meta import Obj

HEADER = """# Kubernetes-managed hosts file.
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
fe00::0\tip6-localnet
fe00::0\tip6-mcastprefix
fe00::1\tip6-allnodes
fe00::2\tip6-allrouters
"""

DOMAIN = "svc.cluster.local"


def _names(short: str, namespace: str, own: str) -> list[str]:
    forms = [f"{short}.{namespace}", f"{short}.{namespace}.svc", f"{short}.{namespace}.{DOMAIN}"]
    return ([short] if namespace == own else []) + forms


def _selects(service: Obj, pod: Obj) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def render(pod: Obj, address: str, records: str) -> str:
    """The hosts file of ``pod`` (at ``address``) with the cluster ``records`` of its
    namespace (:func:`records`)."""
    meta, spec = pod["metadata"], pod["spec"]
    hostname = spec.get("hostname") or meta["name"]
    lines = [HEADER]
    if spec.get("subdomain"):
        fqdn = f"{hostname}.{spec['subdomain']}.{meta['namespace']}.{DOMAIN}"
        lines.append(f"{address}\t{fqdn}\t{hostname}\n")
    else:
        lines.append(f"{address}\t{hostname}\n")
    lines.append("\n# Cluster DNS records (the emulator has no DNS server).\n")
    lines.append(records)
    return "".join(lines)


def records(
    own: str,
    services: Iterable[Obj],
    peers: Iterable[tuple[Obj, str]],
    served: Mapping[tuple[str, str], str],
) -> str:
    """The cluster DNS records a pod of namespace ``own`` sees: ``services`` and ``peers``
    (pod, address) of every namespace, ``served`` (namespace, Service) -> the emulator's
    own address. The same for every pod of a namespace (computed once for them all)."""
    lines = []
    peers = list(peers)
    headless: set[tuple[str, str]] = set()
    for service in services:
        ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
        if (service.get("spec") or {}).get("clusterIP") == "None":
            headless.add((ns, name))
        names = " ".join(_names(name, ns, own))
        if (ns, name) in served:
            lines.append(f"{served[(ns, name)]}\t{names}\n")
            continue
        for peer, peer_address in peers:
            if peer["metadata"]["namespace"] == ns and _selects(service, peer):
                lines.append(f"{peer_address}\t{names}\n")
    for peer, peer_address in peers:
        ns, peer_spec = peer["metadata"]["namespace"], peer["spec"]
        sub, host = peer_spec.get("subdomain"), peer_spec.get("hostname")
        if sub and host and (ns, sub) in headless:
            lines.append(f"{peer_address}\t{' '.join(_names(f'{host}.{sub}', ns, own))}\n")
    return "".join(lines)


def write(path: Path, text: str) -> None:
    """Write ``text`` into ``path`` in place (its inode is bound into the pod: a new file
    would not be seen), longer content first so that a reader never sees it empty."""
    data = text.encode()
    if not path.exists():
        path.write_bytes(data)
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
