"""Coroutines for code without an event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable


def run_blocking(make: Callable[[], Awaitable[Any]]) -> Any:
    """Runs ``make()`` to its end and returns its result (or raises its
    exception): on this thread when it runs no event loop, else on a thread
    of its own (this one blocks, so call it from async code only where
    blocking is fine)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    outcome = {}

    def work():
        try:
            outcome["value"] = asyncio.run(make())
        except BaseException as e:  # handed to the caller below
            outcome["error"] = e

    thread = threading.Thread(target=work, name="sv-client-sync")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
