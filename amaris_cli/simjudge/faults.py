"""The fault kinds the sim-judge can inject: the one list that the server, `sim-judge --faults` and its
help use (no imports, so the CLI builds its help without loading the server). What each kind does is
described in server.py."""

from __future__ import annotations

FAULT_KINDS = ("429", "500", "503", "reset", "hang", "malformed", "truncated", "wrong_shape", "empty_choices")
REPLY_KINDS = ("scale10", "two_objects", "retracted", "retracted_zh", "retracted_de", "length", "max_tokens",
               "content_filter", "unclosed_think", "echo_auth")
WIRE_KINDS = ("drip", "bad_usage", "choices_object", "choices_number", "content_not_string")
ENDPOINT_KINDS = ("401", "403", "404", "quota", "redirect", "html", "event_stream")
REQUEST_KINDS = ("400",)  # this request is refused (context too long), the endpoint is fine
PROXY_KINDS = ("529", "error_body")  # a provider's "overloaded", a proxy's 200 carrying an error object
ALL_FAULT_KINDS = FAULT_KINDS + REPLY_KINDS + WIRE_KINDS + ENDPOINT_KINDS + REQUEST_KINDS + PROXY_KINDS


def faults_help() -> str:
    """`--faults` help: the default (transient) kinds, then every other kind accepted."""
    others = [k for k in ALL_FAULT_KINDS if k not in FAULT_KINDS]
    return (f"Comma-separated fault kinds. Default: the transient ones, {', '.join(FAULT_KINDS)}. "
            f"Also accepted: {', '.join(others)} (misleading replies, broken bodies, broken endpoints, "
            "a refused request; see the sim-judge in the README).")
