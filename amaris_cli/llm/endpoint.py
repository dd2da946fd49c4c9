"""What an endpoint is called in anything amaris writes or prints, and the answers that stop a stage.

A base URL may carry credentials (`http://user:pass@host/v1`, for a proxy with basic auth; a key as a
query parameter, `?key=...`, for gateways that take one there). They are used for the requests and
nowhere else: `public_url` is the form that may be written (calls.jsonl, run.json, provenance, error
messages), and `url_secrets` lists the parts the client redacts. Every query value is taken for a
credential except the API version (Azure's `api-version`): a parameter's name cannot tell which are keys.

Some answers say that every further request to the endpoint would fail the same way: a rejected
key (401/403), an unknown model or path (404), a redirect, an HTML page or an event stream where a
JSON completion was expected. Sending the rest of a stage's requests would only repeat the error,
so the client raises `EndpointFatal` after the first one; its message names the endpoint and what
to check.
"""

from __future__ import annotations

import base64
from urllib.parse import quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

from amaris_cli.errors import AmarisError
from amaris_cli.terminal import one_line

SDK_DEFAULT_URL = "https://api.openai.com/v1"


class EndpointFatal(AmarisError):
    """The endpoint's answer means no request to it can succeed until the configuration changes."""

    exit_code = 2


REDACTED = "[redacted]"
# Query parameters that are never credentials (kept in what is written, so a run says which API it used).
PUBLIC_QUERY_PARAMS = frozenset({"api-version", "api_version"})


def _query_fields(query: str) -> list[tuple[str, str | None]]:
    """A query string's `name=value` fields as written (a field without `=` has no value)."""
    fields: list[tuple[str, str | None]] = []
    for field in query.split("&"):
        name, eq, value = field.partition("=")
        fields.append((name, value if eq else None))
    return fields


def _public_param(name: str) -> bool:
    return unquote(name).lower() in PUBLIC_QUERY_PARAMS


def _secret_query_values(query: str) -> list[str]:
    """Every value but the API version's; a field without `=` is a value (`?TOKEN`)."""
    return [name if value is None else value for name, value in _query_fields(query)
            if (value is None and name) or (value and not _public_param(name))]


def public_url(url: str | None) -> str:
    """The URL without user info and query values (credentials); the SDK default when none is configured."""
    if not url:
        return f"{SDK_DEFAULT_URL} (the SDK default)"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unparsable base URL)"
    if "@" not in parts.netloc and not _secret_query_values(parts.query):
        return url
    host = parts.netloc.rsplit("@", 1)[1] if "@" in parts.netloc else parts.netloc
    query = "&".join((REDACTED if name else name) if value is None else
                     f"{name}={value if not value or _public_param(name) else REDACTED}"
                     for name, value in _query_fields(parts.query)) if parts.query else ""
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def query_apart(url: str | None) -> tuple[str | None, str]:
    """A base URL without its query, and the query as given: the SDK joins a request's path after the whole base
    URL (a query included, which then swallows the path), so the query goes after the request's path instead."""
    if not url or "?" not in url:
        return url, ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, ""
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", parts.fragment)), parts.query


def strip_userinfo(url: str | None) -> str | None:
    """`url` without credentials (user info, query values), None kept (for fields that record the configured
    value)."""
    return None if url is None else public_url(url)


def redact(text: str, secrets: set[str]) -> str:
    """`text` with each secret (of 4 characters or more; the longest first, so none is left half-replaced)
    replaced by "[redacted]"."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def url_secrets(url: str | None) -> set[str]:
    """The credential parts of a base URL, to be redacted wherever they might be echoed."""
    if not url:
        return set()
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    # as written, decoded (`%2B` or `+` for a space, as servers read a query) and encoded again (as an echo shows it)
    secrets = {s for value in _secret_query_values(parts.query)
               for s in (value, unquote(value), unquote_plus(value), quote_plus(unquote_plus(value)))}
    if "@" not in parts.netloc:
        return secrets
    # The user name alone is not secret (and redacting a common word would garble replies).
    raw = parts.netloc.rsplit("@", 1)[0]
    userinfo = unquote(raw)
    basic = base64.b64encode(userinfo.encode()).decode()  # as an echoed `Authorization: Basic ...` shows it
    return secrets | {s for s in (raw, raw.partition(":")[2], userinfo, userinfo.partition(":")[2], basic) if s}


def _where(agent: str, url: str | None, model: str) -> str:
    return f"the {agent} endpoint {public_url(url)} (model {model!r})"


def fatal_status(agent: str, url: str | None, model: str, key_env: str, status: int, detail: str,
                 location: str | None = None, code: str | None = None) -> EndpointFatal | None:
    """The fatal error for an HTTP status (and the error's `code`), or None when it is not fatal for the endpoint."""
    where = _where(agent, url, model)
    said = f" (it said: {one_line(detail, 300)})" if detail else ""
    if status == 401:
        return EndpointFatal(f"{where} answered HTTP 401 (unauthorized): the API key was rejected{said}; "
                             f"check the key in ${key_env} (set, current, and issued for this endpoint)")
    if status == 403:
        return EndpointFatal(f"{where} answered HTTP 403 (forbidden): the key may not use this model or endpoint{said}; "
                             f"check the key in ${key_env}, its project or organization permissions, and the model name")
    if status == 404:
        return EndpointFatal(f"{where} answered HTTP 404 (not found){said}: the model does not exist there or the base URL "
                             f"is wrong; check agents.{agent}.model and the base URL (OpenAI-compatible servers "
                             "usually end in /v1)")
    if status == 429 and code == "insufficient_quota":  # OpenAI's "out of credit": no wait or retry helps
        return EndpointFatal(f"{where} answered HTTP 429 insufficient_quota: the account has no quota left{said}; "
                             f"check the plan and billing of the key in ${key_env}")
    if 300 <= status < 400:
        target = f" to {public_url(location)}" if location else ""
        return EndpointFatal(f"{where} answered HTTP {status} (a redirect{target}): amaris does not follow redirects "
                             "of its POST requests; set the base URL to the address the endpoint really serves")
    return None


def fatal_content_type(agent: str, url: str | None, model: str, content_type: str) -> EndpointFatal | None:
    """The fatal error for a 200 answer whose content type is not a JSON completion, or None."""
    where = _where(agent, url, model)
    if content_type in ("text/html", "application/xhtml+xml"):
        return EndpointFatal(f"{where} answered with an HTML page ({content_type}) where a JSON completion was "
                             "expected: the base URL points to a web page, a login portal or a proxy, not to an "
                             "OpenAI-compatible API; check the base URL (usually ending in /v1)")
    if content_type == "text/event-stream":
        return EndpointFatal(f"{where} answered with an event stream (text/event-stream) although no streaming was "
                             "requested: check the base URL and any proxy in front of the endpoint that forces streaming")
    return None

