"""Scrapes of memsight's /metrics answered while hostile clients are held open, on loopback only.

Two kinds of client, each kept at its count for the whole run (one that the server drops is re-opened at
once): slow ones that send a request line and then one header line every INTERVAL seconds, never ending
the request (slowloris), and idle ones that connect and send nothing. Meanwhile a scraper asks for /metrics
every PERIOD seconds with a TIMEOUT, as Prometheus would, and counts the answers.

    python bench/exporter_slow_clients.py [--slow 64] [--idle 64] [--seconds 30]

Bounded in count (at most --slow + --idle sockets) and time (--seconds); binds 127.0.0.1 only. Runs the
exporter of the checkout it is started from: `PYTHONPATH=OTHER_CHECKOUT python bench/...` measures another.
"""

from __future__ import annotations

import argparse
import pathlib
import selectors
import socket
import sys
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # after PYTHONPATH: another checkout given there is the one measured

MAX_CLIENTS = 1024  # a bound on what this script opens, whatever the arguments


class HostileClients:
    """`slow` + `idle` connections to (host, port), each re-opened when the server drops it, on one thread."""

    def __init__(self, host: str, port: int, slow: int, idle: int, interval_s: float = 1.0) -> None:
        if slow + idle > MAX_CLIENTS:
            raise ValueError(f"at most {MAX_CLIENTS} clients, asked for {slow + idle}")
        self.address = (host, port)
        self.kinds = ["slow"] * slow + ["idle"] * idle
        self.interval_s = interval_s
        self.reopened = 0  # connections the server closed (deadline, shed) and this opened again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hostile-clients", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._lines = 0

    def __enter__(self) -> HostileClients:
        for slot, kind in enumerate(self.kinds):
            self._open(slot, kind)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    def _open(self, slot: int, kind: str) -> None:
        sock = socket.create_connection(self.address, timeout=5)
        sock.setblocking(False)
        if kind == "slow":
            sock.send(b"GET /metrics HTTP/1.1\r\n")
        self._selector.register(sock, selectors.EVENT_READ, (slot, kind))

    def _run(self) -> None:
        next_line = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=min(0.1, max(0.0, next_line - time.monotonic()))):
                self._dropped_or_answered(key)
            if time.monotonic() >= next_line:
                next_line += self.interval_s
                self._lines += 1
                for key in list(self._selector.get_map().values()):
                    if key.data[1] == "slow":
                        try:
                            key.fileobj.send(f"X-Slow-{self._lines}: 1\r\n".encode())
                        except OSError:
                            self._dropped_or_answered(key)

    def _dropped_or_answered(self, key: selectors.SelectorKey) -> None:
        sock = key.fileobj
        try:
            if sock.recv(65536):
                return  # a reply (a refusal): wait for the close
        except BlockingIOError:
            return
        except OSError:
            pass  # reset
        self._selector.unregister(sock)
        sock.close()
        if not self._stop.is_set():
            self.reopened += 1
            self._open(*key.data)


def scrape_once(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (loopback)
            return response.status == 200 and b"memsight_" in response.read()
    except OSError:
        return False


def measure(
    slow: int, idle: int, seconds: float, period_s: float, timeout_s: float, interval_s: float
) -> dict:
    from collectors.exporter import PrometheusExporter
    from collectors.state import StateBuilder

    state = StateBuilder().build(time.time())
    with PrometheusExporter(lambda: state, host="127.0.0.1") as exporter:
        host, port = exporter.address
        with HostileClients(host, port, slow, idle, interval_s) as clients:
            time.sleep(min(2.0, seconds / 10))  # every client connected and sending
            served = asked = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                began = time.monotonic()
                asked += 1
                served += scrape_once(exporter.url, timeout_s)
                time.sleep(max(0.0, period_s - (time.monotonic() - began)))
            reopened = clients.reopened
    return {"served": served, "asked": asked, "reopened": reopened}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=64, help="slowloris clients held (default 64)")
    parser.add_argument("--idle", type=int, default=64, help="idle clients held (default 64)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to scrape (default 30)")
    parser.add_argument("--period", type=float, default=0.5, help="seconds between scrapes (default 0.5)")
    parser.add_argument("--timeout", type=float, default=2.0, help="a scrape's timeout, s (default 2)")
    parser.add_argument("--interval", type=float, default=1.0, help="a slow client's header period (1 s)")
    args = parser.parse_args()
    got = measure(args.slow, args.idle, args.seconds, args.period, args.timeout, args.interval)
    import collectors.exporter as exporter  # noqa: PLC0415

    print(
        f"{args.slow} slow + {args.idle} idle clients held for {args.seconds:.0f} s "
        f"(exporter {pathlib.Path(exporter.__file__).parent.parent}): {got['served']} of {got['asked']} "
        f"scrapes served ({100 * got['served'] / max(1, got['asked']):.0f}%), clients re-opened "
        f"{got['reopened']} times"
    )


if __name__ == "__main__":
    main()
