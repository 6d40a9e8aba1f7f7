"""HTTP/1.1 to one server on asyncio streams (standard library only).

Keep-alive connections, at most ``max_connections`` at once per event loop,
every exchange bounded in time (``timeout_s``) and in size (head and body).
The pool is kept per event loop, so one client serves the sync forms (a
fresh loop per call) as well as a long-lived loop.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.parse
from typing import Dict, Optional, Tuple

from .errors import ConfigurationError, SvServeError

MAX_HEAD_BYTES = 64 << 10
MAX_LINE_BYTES = 8 << 10
DEFAULT_MAX_BODY_BYTES = 64 << 20
# sv-serve closes a keep-alive connection idle for its --header-timeout-s
# (10 s by default); a connection idle longer than this is not reused.
MAX_IDLE_S = 4.0
# The first bytes of a TLS record (alert or handshake): a server that
# speaks TLS answered a plaintext request.
_TLS_RECORDS = (b"\x15\x03", b"\x16\x03")


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body


class _Conn:
    __slots__ = ("reader", "writer", "loop", "idle_since")

    def __init__(self, reader, writer, loop):
        self.reader = reader
        self.writer = writer
        self.loop = loop
        self.idle_since = 0.0

    def usable(self, loop) -> bool:
        return (self.loop is loop and not self.reader.at_eof()
                and not self.writer.is_closing()
                and time.monotonic() - self.idle_since < MAX_IDLE_S)

    def close(self):
        """Closes it from any thread (a transport is its loop's to touch)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is self.loop:
                self.writer.close()
            elif not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self.writer.close)
        except RuntimeError:  # its loop closed meanwhile
            pass


class _Stale(Exception):
    """A reused connection was closed before any answer byte came."""


def parse_url(url: str) -> Tuple[bool, str, int, str]:
    """(tls, host, port, path prefix) of ``http(s)://HOST[:PORT][/PREFIX]``."""
    if not isinstance(url, str):
        raise ConfigurationError("settings", f"url must be a string, not "
                                 f"{type(url).__name__}", str(url))
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            "settings", f"url {url!r}: expected http://HOST:PORT or "
            "https://HOST:PORT", url)
    if parts.query or parts.fragment or parts.username:
        raise ConfigurationError(
            "settings", f"url {url!r}: no query, fragment or user info", url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise ConfigurationError("settings", f"url {url!r}: {e}", url) from e
    return parts.scheme == "https", parts.hostname, port, parts.path.rstrip("/")


class HttpClient:
    """Requests to one ``http(s)://HOST:PORT`` with an optional bearer token."""

    def __init__(self, url: str, token: Optional[str] = None,
                 ca_file: Optional[str] = None, max_connections: int = 64,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.url = url
        tls, self.host, self.port, self.prefix = parse_url(url)
        if ca_file is not None and not tls:
            raise ConfigurationError(
                "settings", f"ca_file is only for an https url, not {url}", url)
        self._tls = None
        if tls:
            try:
                self._tls = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigurationError(
                    "settings", f"ca_file {ca_file!r}: {e}", url) from e
            self._tls.minimum_version = ssl.TLSVersion.TLSv1_2
        self._token = token
        self._max_connections = int(max_connections)
        if self._max_connections < 1:
            raise ConfigurationError("settings",
                                     "connections must be at least 1", url)
        self._max_body = int(max_body_bytes)
        # Per event loop: its idle connections and its connection slots.
        self._idle = {}
        self._slots = {}

    # -- the pool ---------------------------------------------------------------

    def _forget_closed_loops(self):
        # list(): other threads' loops may add entries meanwhile.
        for loop in [lp for lp in list(self._slots) if lp.is_closed()]:
            self._slots.pop(loop, None)
            for conn in self._idle.pop(loop, []):
                conn.close()

    def _slot(self, loop) -> asyncio.Semaphore:
        self._forget_closed_loops()
        sem = self._slots.get(loop)
        if sem is None:
            sem = self._slots[loop] = asyncio.Semaphore(self._max_connections)
        return sem

    def _take_idle(self, loop) -> Optional[_Conn]:
        idle = self._idle.get(loop, [])
        while idle:
            conn = idle.pop()
            if conn.usable(loop):
                return conn
            conn.close()
        return None

    async def _acquire(self, sem, timeout_s):
        acquire = asyncio.ensure_future(sem.acquire())
        done, _ = await asyncio.wait({acquire}, timeout=max(0.0, timeout_s))
        if done:
            return
        acquire.cancel()
        try:
            await acquire
        except asyncio.CancelledError:
            pass
        else:  # it got the slot as it was cancelled
            sem.release()
        raise SvServeError(0, "timeout", f"no free connection to {self.url} "
                           f"within {timeout_s:g} s")

    async def _open(self, loop) -> _Conn:
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self._tls,
                server_hostname=self.host if self._tls else None,
                limit=MAX_LINE_BYTES * 2)
        except ssl.SSLError as e:
            raise ConfigurationError(
                "tls", f"TLS with {self.url} failed: {e.reason or e} (is it "
                "https with a certificate of ca_file's CA, for this host "
                "name?)", self.url) from e
        except OSError as e:
            raise SvServeError(0, "connect", f"cannot connect to {self.url}: "
                               f"{type(e).__name__}: {e}") from e
        return _Conn(reader, writer, loop)

    def close_idle(self):
        """Closes the idle connections; later calls open new ones."""
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    # -- one exchange -----------------------------------------------------------

    def _head(self, method, target, body, headers) -> bytes:
        lines = [f"{method} {self.prefix}{target} HTTP/1.1",
                 f"Host: {self.host}:{self.port}",
                 f"Content-Length: {len(body)}", "Connection: keep-alive"]
        if self._token:
            lines.append(f"Authorization: Bearer {self._token}")
        lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _line(self, reader) -> bytes:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise SvServeError(0, "garbled", f"{self.url} sent a header line "
                               "over the limit") from None

    async def _read_head(self, conn, reused):
        first = await self._line_or_eof(conn.reader, reused)
        if first[:2] in _TLS_RECORDS:
            raise ConfigurationError(
                "tls", f"{self.url} speaks TLS: use an https:// url", self.url)
        parts = first.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or \
                not parts[1].isdigit():
            raise ConfigurationError(
                "not_sv_serve", f"{self.url} did not answer in HTTP/1.1: "
                f"{first[:80]!r}", self.url)
        headers, size = {}, len(first)
        while True:
            line = await self._line(conn.reader)
            size += len(line)
            if size > MAX_HEAD_BYTES:
                raise SvServeError(0, "garbled",
                                   f"{self.url} sent a head over 64 KiB")
            if line in (b"\r\n", b"\n"):
                return int(parts[1]), headers
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()

    async def _line_or_eof(self, reader, reused) -> bytes:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            if reused and not e.partial:
                raise _Stale() from None
            if e.partial[:2] in _TLS_RECORDS:
                return e.partial
            raise
        except ConnectionResetError:
            if reused:
                raise _Stale() from None
            raise
        except asyncio.LimitOverrunError:
            raise SvServeError(0, "garbled", f"{self.url} sent a status line "
                               "over the limit") from None
        return line

    async def _read_body(self, reader, method, status, headers) -> bytes:
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await self._read_chunked(reader)
        length = headers.get("content-length")
        if length is None:  # the body ends with the connection
            data = bytearray()
            while len(data) <= self._max_body:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    break
                data += chunk
            data = bytes(data)
        else:
            if not length.isdigit():
                raise SvServeError(0, "garbled", f"{self.url} sent "
                                   f"Content-Length {length!r}")
            if int(length) > self._max_body:
                raise SvServeError(0, "too_large", f"{self.url}'s answer "
                                   f"has {length} bytes, over the "
                                   f"{self._max_body}-byte limit")
            data = await reader.readexactly(int(length))
        if len(data) > self._max_body:
            raise SvServeError(0, "too_large", f"{self.url}'s answer exceeds "
                               f"{self._max_body} bytes")
        return data

    async def _read_chunked(self, reader) -> bytes:
        data = bytearray()
        while True:
            size_line = (await self._line(reader)).split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise SvServeError(0, "garbled", f"{self.url} sent chunk "
                                   f"size {size_line[:20]!r}") from None
            if size == 0:
                while (await self._line(reader)) not in (b"\r\n", b"\n"):
                    pass
                return bytes(data)
            if len(data) + size > self._max_body:
                raise SvServeError(0, "too_large", f"{self.url}'s answer "
                                   f"exceeds {self._max_body} bytes")
            data += await reader.readexactly(size)
            await reader.readexactly(2)

    async def _exchange(self, conn, reused, method, target, body, headers):
        try:
            conn.writer.write(self._head(method, target, body, headers) + body)
            await conn.writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            if reused:
                raise _Stale() from None
            raise
        status, head = await self._read_head(conn, reused)
        data = await self._read_body(conn.reader, method, status, head)
        keep = head.get("connection", "").lower() != "close" and \
            ("content-length" in head or "chunked" in
             head.get("transfer-encoding", "").lower() or
             status in (204, 304))
        return Response(status, head, data), keep

    async def request(self, method: str, target: str, body: bytes = b"",
                      headers: Optional[Dict[str, str]] = None,
                      timeout_s: float = 60.0,
                      retry_stale: bool = True) -> Response:
        """One request; raises ``SvServeError`` (status 0) when no answer
        came within ``timeout_s`` (waiting for a free connection included),
        ``ConfigurationError`` for TLS and not-HTTP answers. A request that
        is safe to send twice (``retry_stale``) goes once more on a fresh
        connection when a reused one turns out closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(timeout_s)
        sem = self._slot(loop)
        await self._acquire(sem, float(timeout_s))
        try:
            return await self._attempts(loop, deadline, method, target, body,
                                        headers, retry_stale)
        finally:
            sem.release()

    async def _attempts(self, loop, deadline, method, target, body, headers,
                        retry_stale):
        for attempt in (1, 2):
            conn = self._take_idle(loop)
            reused = conn is not None
            left = deadline - loop.time()
            try:
                if conn is None:
                    conn = await asyncio.wait_for(self._open(loop),
                                                  max(0.0, left))
                    left = deadline - loop.time()
                response, keep = await asyncio.wait_for(
                    self._exchange(conn, reused, method, target, body,
                                   headers), max(0.0, left))
            except _Stale:
                conn.close()
                if retry_stale and attempt == 1:
                    continue
                raise SvServeError(0, "lost", f"{self.url} closed the "
                                   "connection before answering") from None
            except asyncio.TimeoutError:
                if conn is not None:
                    conn.close()
                raise SvServeError(0, "timeout", f"no answer from {self.url} "
                                   "within its deadline") from None
            except (SvServeError, ConfigurationError):
                if conn is not None:
                    conn.close()
                raise
            except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                if conn is not None:
                    conn.close()
                raise SvServeError(0, "lost", f"the exchange with {self.url} "
                                   f"broke: {type(e).__name__}: {e}") from e
            except BaseException:  # cancelled: the connection is mid-exchange
                if conn is not None:
                    conn.close()
                raise
            if keep:
                conn.idle_since = time.monotonic()
                self._idle.setdefault(loop, []).append(conn)
            else:
                conn.close()
            return response
        raise AssertionError("unreachable")
