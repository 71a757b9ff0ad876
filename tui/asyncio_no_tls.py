"""asyncio imported without ssl, for the process that draws the TUI (issue 20: the Live screen's own memory).

Textual runs on asyncio, and asyncio.base_events imports ssl only to offer TLS transports, which memsight
never opens: its exporter serves plain HTTP, and its scrapes of an engine's /metrics go through urllib, which
imports ssl for itself when it is first needed. ssl maps OpenSSL's libcrypto and libssl: the Live screen at
2 Hz was 42.4 MiB resident with them and 38.1 MiB without, side by side at 45 s, and ssl's import took 14 ms
of its start-up. asyncio treats a missing ssl as a Python built without it (`ssl = None`: asking it for a
TLS transport raises RuntimeError "stdlib ssl module not available"); only asyncio's own modules see it
missing, and an `import ssl` after this one loads it as usual.

tui/app.py imports `asyncio` from here, before textual, so this is asyncio's first import in the TUI's
process; where asyncio or ssl is already imported (a test run, the exporter started first), nothing changes.
"""

from __future__ import annotations

import sys


def _import_asyncio_without_ssl():
    if "asyncio" not in sys.modules and "ssl" not in sys.modules:
        sys.modules["ssl"] = None  # `import ssl` raises ImportError, which asyncio catches
        try:
            import asyncio  # noqa: PLC0415
        finally:
            del sys.modules["ssl"]
    import asyncio  # noqa: PLC0415

    return asyncio


asyncio = _import_asyncio_without_ssl()
