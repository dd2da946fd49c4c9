"""Errors a user can act on. The CLI prints them without a traceback and exits non-zero."""

from __future__ import annotations


class AmarisError(Exception):
    """Base class: the message is written for the user and says what to do next."""

    exit_code = 1


class InputError(AmarisError):
    """Bad input: names the file, the line (when there is one) and the reason."""

    exit_code = 2

    def __init__(self, path: object, reason: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


class InputErrors(AmarisError):
    """Several bad lines in one input, all reported at once so one fix-and-rerun is enough."""

    exit_code = 2

    def __init__(self, errors: list[InputError], limit: int = 20) -> None:
        self.errors = errors
        shown = [str(e) for e in errors[:limit]]
        more = len(errors) - len(shown)
        if more > 0:
            shown.append(f"... and {more} more bad line(s)")
        super().__init__("\n".join(shown))


class AgentFailed(AmarisError):
    """An agent gave no usable answer after its retries and re-asks (the judge unreachable past its outage
    budget, or answers that break the contract). Under `on_error = skip|neutral` the step goes on without it
    (policy.py: a gap); under `fail` it ends the command."""


class ConfigError(AmarisError):
    exit_code = 2


class RunLockedError(AmarisError):
    """Another process writes what this one would write (its pid and command line are in the message)."""

    exit_code = 3


class WaitTimeout(RunLockedError):
    """Gave up waiting for another process (an evolution, a rubric version, a lock)."""


class StageFailed(AmarisError):
    """A stage finished but some records failed under the `fail` policy (everything else is written).
    `retry` says what resumes: the command that retries them."""

    exit_code = 4

    def __init__(self, message: str, retry: str | None = None) -> None:
        super().__init__(message)
        self.retry = retry
