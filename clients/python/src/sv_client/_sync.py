"""Coroutines for code without an event loop.

The sync forms run on one event loop of their own, on a daemon thread
started at the first call, so their keep-alive connections serve every
later sync call (from any thread) instead of dying with a loop per call.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Awaitable, Callable, Optional

_lock = threading.Lock()
_loop: Optional[asyncio.AbstractEventLoop] = None
_thread: Optional[threading.Thread] = None
_pid = 0


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve():
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            _thread = threading.Thread(target=serve, name="sv-client-loop",
                                       daemon=True)
            _thread.start()
            ready.wait()
            _loop, _pid = loop, os.getpid()
        return _loop


def run_blocking(make: Callable[[], Awaitable[Any]]) -> Any:
    """Runs ``make()`` on the background loop and returns its result (or
    raises its exception). Interrupted (KeyboardInterrupt), it cancels the
    call, which still stops its sandbox."""
    loop = _background_loop()
    if threading.current_thread() is _thread:
        raise RuntimeError("a sync form of sv_client was called from its own "
                           "event loop: await the async form")
    future = asyncio.run_coroutine_threadsafe(make(), loop)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise
