"""Which host names this machine's loopback: the one check behind the
server's loopback-only rules (bind address, Host header) and the pull's
"http only from loopback to loopback"."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """Whether a host (an address to bind, a URL's host name, or a Host
    header with or without port) names this machine's loopback."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
