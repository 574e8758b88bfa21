"""A TCP relay in user space that delays every byte: the lab's delay and jitter where the kernel has no netem.

Each direction of each relayed connection is a delay line, not a pause: a chunk read at time t is written on
at t + delay (+ jitter), while later chunks are read meanwhile, so a stream keeps its rate and only arrives
later (a relay that slept before each write would cut the rate to one chunk per delay). Jitter moves each
chunk by up to ± ``jitter_ms`` but never ahead of the chunk before it: TCP delivers bytes in order, so this is
what an application sees of a jittery path.

What it does not emulate: the TCP connections on either side of it see the veth's sub-millisecond round trip,
so TCP's own window growth and loss recovery run at that round trip, not at the emulated one (HTTP/2's flow
control windows, end to end through the relay, do see the full round trip). ``lab.py`` measures the relay's
own cost per round trip and takes it off the delay it asks for.

Run by the lab inside the server's namespace::

    python -m sonic_hep.workflows.netlab.relay --route 10.77.0.1:9001=10.77.0.1:8001 --delay-ms 25 --jitter-ms 2

It prints one line, ``relay ready``, once every route listens, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import random
import socket
import sys
import threading
import time
from collections import deque

CHUNK = 1 << 18  #: bytes read at a time (a quarter MiB: few wake-ups per megabyte)


class DelayLine:
    """One direction of one connection: a thread reads chunks and stamps each with when it is due; another
    writes each one on when due, in order (threads and ``time.sleep``, not an event loop: a loop's timers
    wake to the millisecond, which would add up to a millisecond each way to a 1 ms link)."""

    def __init__(self, source: socket.socket, sink: socket.socket, delay_s: float, jitter_s: float,
                 rng: random.Random):
        self.source, self.sink = source, sink
        self.delay_s, self.jitter_s, self.rng = delay_s, jitter_s, rng
        self.chunks: deque[tuple[float, bytes]] = deque()
        self.ready = threading.Condition()

    def start(self) -> None:
        for target in (self._read, self._write):
            threading.Thread(target=target, daemon=True).start()

    def due(self, now: float, last: float) -> float:
        jitter = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
        return max(last, now + max(0.0, self.delay_s + jitter))

    def _read(self) -> None:
        last = 0.0
        while True:
            try:
                data = self.source.recv(CHUNK)
            except OSError:
                data = b""
            last = self.due(time.monotonic(), last)
            with self.ready:
                self.chunks.append((last, data))
                self.ready.notify()
            if not data:
                return

    def _write(self) -> None:
        while True:
            with self.ready:
                while not self.chunks:
                    self.ready.wait()
                due, data = self.chunks.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:  # the source closed: pass the end on, as late as its last byte
                    self.sink.shutdown(socket.SHUT_WR)
                    return
                self.sink.sendall(data)
            except OSError:
                return


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _accept(listener: socket.socket, target: tuple[str, int], delay_s: float, jitter_s: float,
            rng: random.Random) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        DelayLine(client, upstream, delay_s, jitter_s, rng).start()
        DelayLine(upstream, client, delay_s, jitter_s, rng).start()


def serve(routes: list[tuple[str, str]], delay_ms: float, jitter_ms: float, seed: int = 1) -> None:
    """Relays each ``(listen, target)`` route; returns once all listen (the threads run on)."""
    rng = random.Random(seed)
    for listen, target in routes:
        listener = socket.create_server(split(listen))
        threading.Thread(target=_accept, args=(listener, split(target), delay_ms / 1000, jitter_ms / 1000, rng),
                         daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sonic_hep.workflows.netlab.relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--route", action="append", required=True, metavar="LISTEN=TARGET",
                        help="HOST:PORT to listen on = HOST:PORT to relay to (repeatable)")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="delay of each direction (half the round trip)")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="each chunk's delay moves by up to ± this")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    routes = [tuple(route.split("=", 1)) for route in args.route]
    serve(routes, args.delay_ms, args.jitter_ms, args.seed)
    print("relay ready", flush=True)
    threading.Event().wait()  # until SIGTERM
    return 0


if __name__ == "__main__":
    sys.exit(main())
