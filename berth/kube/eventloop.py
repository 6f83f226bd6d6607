"""The event loop the shim's writes run on.

The shim's bindings and events go over asyncio streams (http1.py), and most of
their client-side cost is the loop itself and asyncio's TLS transport, which
CPython implements in Python (asyncio/sslproto.py). uvloop implements both in
C over libuv; measured on the shim's drain benchmark (docs/benchmarks.md) it
takes about a tenth off the shim's CPU per pod. Where uvloop is not installed
(it has no Windows build), the standard loop runs the same code.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["new_event_loop"]

log = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is importable, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        log.debug("uvloop is not installed: the shim runs on asyncio's own event loop")
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
