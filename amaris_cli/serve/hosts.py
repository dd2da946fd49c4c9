"""Which Host headers a server bound to this machine only answers (DNS rebinding).

A web page can point a name it controls at 127.0.0.1 after loading ("DNS rebinding"): its scripts then
read the server's GET answers as same-origin, with no Origin header to refuse (app.py refuses every
request that carries one). What gives such a request away is its Host header, the attacker's name. A
server bound to a loopback address answers only requests addressed to a loopback address or to
`localhost`, which is what every trainer's client on this machine sends. A server bound to another
address (`--host 0.0.0.0` for a trainer on another machine) cannot know the names it is reached by and
checks nothing: that is the user's choice to expose it.
"""

from __future__ import annotations

import ipaddress

LOCAL_NAMES = frozenset({"localhost", "localhost."})


def _loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bound_to_this_machine(host: str) -> bool:
    """Whether a server bound to `host` is reachable from this machine only."""
    return host.lower() in LOCAL_NAMES or _loopback(host.strip("[]"))


def host_name(header: str) -> str:
    """The name or address of a Host header, without its port: `[::1]:8000` -> `::1`, `localhost:80` ->
    `localhost`."""
    header = header.strip()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def foreign_host(bound: str, header: bytes | None) -> str | None:
    """The Host header a server bound to `bound` must refuse, or None. A request without one (HTTP/1.0)
    does not come from a browser, which always sends it."""
    if header is None or not bound_to_this_machine(bound):
        return None
    value = header.decode("latin-1")
    name = host_name(value).lower()
    return None if name in LOCAL_NAMES or _loopback(name) else value
