"""What went wrong on the way to the judge, named: a refused connection, a name that does not resolve, a
failed TLS handshake, a timeout, a connection reset or closed.

The SDK reports most of these as its own APIConnectionError or APITimeoutError (its aiohttp transport maps a
refused connection to a *connect timeout*), with the real cause somewhere down the exception chain. Reading
the whole chain gives the cause, so the message names it and gives advice only where the advice is right
("raise the timeout" for a refused connection was wrong: nothing was listening).

    refused   nothing listens at the endpoint's host and port (the judge is down or not started yet)
    dns       the host name does not resolve
    tls       the TLS handshake failed (https:// to a plain-HTTP server, a certificate problem):
              a configuration error, not an outage
    timeout   no answer within the attempt's deadline
    reset     the endpoint closed or reset the connection before answering
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from amaris_cli.terminal import one_line

OUTAGE_KINDS = ("refused", "dns", "timeout", "reset", "connection", "rate_limit")


def is_outage(kind: str) -> bool:
    """Whether a fault of this kind, on every request to an endpoint, means the endpoint is down (or
    rate-limiting all of it): waited out within the outage budget. HTTP 5xx counts; a malformed body does not,
    unless the endpoint has given completions before (llm/client.py)."""
    return kind in OUTAGE_KINDS or (kind.startswith("http_5") and kind[5:].isdigit())


@dataclass(frozen=True)
class TransportFault:
    kind: str  # refused, dns, tls, timeout, reset, connection (anything else that failed on the way)
    reason: str


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _where(base_url: str | None) -> str:
    try:
        parts = urlsplit(base_url or "https://api.openai.com/v1")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{parts.hostname}:{port}"
    except ValueError:
        return "the endpoint"


def classify(exc: BaseException, base_url: str | None, timeout: float, agent: str) -> TransportFault:
    """The cause of a failed attempt, as the exception chain shows it (the deepest known cause wins)."""
    where = _where(base_url)
    chain = list(_chain(exc))
    names = {type(e).__name__ for e in chain}
    for e in reversed(chain):  # deepest first: the OS's own error is the most precise
        if isinstance(e, ConnectionRefusedError):
            return TransportFault("refused", f"connection refused by {where}: nothing is listening there "
                                  "(is the judge running, and is the base URL's port right?)")
        if isinstance(e, socket.gaierror) or type(e).__name__ == "ClientConnectorDNSError":
            return TransportFault("dns", f"the host of {where} does not resolve ({one_line(str(e), 160)}): "
                                  "check the base URL's host name")
        if isinstance(e, ssl.SSLError) or type(e).__name__ in ("ClientConnectorSSLError", "ClientSSLError",
                                                               "ClientConnectorCertificateError"):
            return TransportFault("tls", f"the TLS handshake with {where} failed ({one_line(str(e), 200)}): an "
                                  "https:// base URL for a plain-HTTP server, or a certificate the client does not trust")
        if isinstance(e, ConnectionResetError | BrokenPipeError | ConnectionAbortedError) or type(e).__name__ in (
                "ServerDisconnectedError", "ClientOSError", "ReadError", "WriteError") or (
                type(e).__name__ == "RemoteProtocolError" and "disconnected" in str(e).lower()):
            return TransportFault("reset", f"{where} closed the connection before answering "
                                  f"({one_line(str(e) or type(e).__name__, 200)})")
    if "ConnectTimeout" in names or "ConnectionTimeoutError" in names:
        return TransportFault("timeout", f"timed out after {timeout:g}s connecting to {where} (a firewall dropping "
                              "packets, or an overloaded endpoint)")
    if any(isinstance(e, TimeoutError) for e in chain) or names & {"APITimeoutError", "ReadTimeout", "TimeoutException"}:
        return TransportFault("timeout", f"timed out after {timeout:g}s for the whole attempt: no answer from "
                              f"{where} (raise agents.{agent}.timeout if the judge is slow)")
    return TransportFault("connection", f"connection to {where} failed: {one_line(str(chain[-1]) or type(chain[-1]).__name__, 300)}")
