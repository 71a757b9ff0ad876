"""Value builders shared by the collectors tests: a 64 GiB host whose only moving parts are given."""

from __future__ import annotations

from collectors.snapshots import OSSnapshot, ProcessInfo

GiB = 2**30


def os_snapshot(t: float, available: int, procs: tuple[ProcessInfo, ...] = (), oom: int = 0) -> OSSnapshot:
    return OSSnapshot(
        t=t,
        mem_total=64 * GiB,
        mem_available=available,
        cached=0,
        shmem=0,
        swap_total=0,
        swap_free=0,
        psi_some_avg10=None,
        psi_full_avg10=None,
        oom_kill=oom,
        processes=tuple(procs),
    )


def serve_body(body: bytes):  # noqa: ANN201  (http.server.ThreadingHTTPServer)
    """A stand-in HTTP server on 127.0.0.1 (a free port) that answers every GET with `body`, on a daemon
    thread (a vLLM server, or any server that is not memsight); the caller shuts it down and closes it."""
    import threading  # noqa: PLC0415
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: PLC0415

    class StandIn(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
