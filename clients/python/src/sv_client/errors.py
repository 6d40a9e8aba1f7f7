"""The errors of talking to sv-serve.

Two families, kept apart on purpose:

- ``SvServeError``: sv-serve (or the way to it) failed one call. Transient or
  about one sandbox: a verification turns it into a masked sample.
- ``ConfigurationError``: the client is set up wrong (a token sv-serve
  refuses, a URL that is not sv-serve, a TLS mismatch). Every call would fail
  the same way, so it is raised, never masked: a trainer that masked it would
  throw away every sample without a word.
"""

from __future__ import annotations

import json
from typing import Optional


class SvServeError(RuntimeError):
    """One call failed. ``status`` is the HTTP status (0: no answer came),
    ``code`` sv-serve's error code (``no_such_sandbox``, ``not_found``,
    ``invalid_path``, ``too_many_sandboxes``, ...) or, with status 0, what
    went wrong on the way (``connect``, ``timeout``, ``lost``,
    ``too_large``, ``garbled``), and ``message`` says it in words."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"sv-serve: {status} {code}: {message}"
                         if status else f"sv-serve: {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @property
    def transport(self) -> bool:
        """No answer came, or the server could not serve the call now
        (overloaded, draining, failing): trying again later may work."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class ConfigurationError(Exception):
    """The operator's to fix: ``reason`` is ``unauthorized`` (401: no token
    or one sv-serve refuses), ``forbidden`` (403, from something in front of
    sv-serve), ``unknown_route`` (404 from something that is not sv-serve,
    or an sv-serve without the route), ``not_sv_serve`` (an answer sv-serve
    never gives), ``tls`` (the TLS handshake failed: certificate, CA, host
    name, or one side speaks TLS and the other not) or ``settings`` (the
    client's own settings are wrong). ``url`` is the server's address;
    ``http_status`` the status when one came."""

    def __init__(self, reason: str, message: str, url: str = "",
                 http_status: Optional[int] = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.url = url
        self.http_status = http_status


def error_fields(body: bytes):
    """(code, message) of sv-serve's error body, or None when the body is
    not one (then something else answered)."""
    try:
        err = json.loads(body)["error"]
        return str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        return None


def answer_error(url: str, status: int, body: bytes) -> Exception:
    """The exception for an answer that is not the call's success:
    ``ConfigurationError`` for what no retry can fix, else ``SvServeError``."""
    fields = error_fields(body)
    snippet = body[:200].decode("utf-8", errors="replace")
    if status == 401:
        return ConfigurationError(
            "unauthorized", f"{url} refused the bearer token (401): give the "
            "token sv-serve's --token-file holds (token or token_file)",
            url, status)
    if status == 403:
        return ConfigurationError(
            "forbidden", f"{url} answered 403 Forbidden: {snippet!r}", url,
            status)
    if fields is None:
        if status == 404:
            return ConfigurationError(
                "unknown_route", f"{url} answered 404 and is not sv-serve "
                f"(check the URL, host and port): {snippet!r}", url, status)
        if status == 405 or 200 <= status < 300:
            return ConfigurationError(
                "not_sv_serve", f"{url} answered {status} with a body "
                f"sv-serve never sends (is it sv-serve?): {snippet!r}", url,
                status)
        return SvServeError(status, f"http_{status}", snippet)
    code, message = fields
    if code == "bad_request" and "TLS" in message:
        return ConfigurationError(
            "tls", f"{url} answered {status}: {message}: use an https:// url",
            url, status)
    if code in ("no_such_endpoint", "method_not_allowed"):
        return ConfigurationError(
            "unknown_route", f"{url} is sv-serve but has no such route "
            f"({status} {code}): is it older than this client?", url, status)
    return SvServeError(status, code, message)
