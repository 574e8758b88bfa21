"""A TCP relay in the test process that can be *paused*: a silent network partition without netem.

This machine's kernel has no ``netem``, and a partition is not a closed connection: packets stop and nobody
says so. Paused, the relay moves no byte either way while both of its sockets stay open, so each side sees a
peer that is connected and silent (what a dropped link or a dead host looks like); resumed, what was held flows
on. A connection made while paused is accepted (the kernel completes the handshake anyway) and stays as silent.

::

    with Relay(server.grpc_url) as relay:       # clients use relay.address instead of the server's
        relay.pause()                           # a silent partition ...
        relay.resume()                          # ... healed
        relay.stall_after(2000)                 # the next 2,000 bytes to the server pass, then a partition
        relay.forwarded                         # bytes moved so far: {"up": to the server, "down": back}
"""

from __future__ import annotations

import socket
import threading


class Relay:
    """Relays every connection made to :attr:`address` (``127.0.0.1:PORT``) to ``target`` (``HOST:PORT``).

    One thread accepts; each connection gets one thread per direction that reads a chunk, waits while the relay
    is paused, then writes it on (a chunk read just before :meth:`pause` is held, not delivered). What moved is
    counted per direction in :attr:`forwarded` (bytes of the application's stream, not of packets).
    """

    def __init__(self, target: str):
        host, _, port = target.rpartition(":")
        self.target = (host.strip("[]"), int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        self.connections = 0  # accepted so far
        self.forwarded = {"up": 0, "down": 0}  # bytes written on to the target ("up") and back to clients
        self.held = 0  # bytes of the chunk that a stall cut, held until resumed
        self._budget: int | None = None  # bytes "up" that may still pass before a stall (stall_after)
        threading.Thread(target=self._accept, name=f"relay-{self.address}", daemon=True).start()

    def pause(self) -> None:
        """Stops moving bytes, both ways, on every connection (open or made later); sockets stay open."""
        self._flowing.clear()

    def resume(self) -> None:
        with self._lock:
            self._budget, self.held = None, 0
        self._flowing.set()

    def stall_after(self, nbytes: int) -> None:
        """Lets ``nbytes`` more bytes go to the target, then pauses as :meth:`pause` does, in the middle of a
        chunk if that is where the count runs out: a link that stalls in the middle of a message."""
        with self._lock:
            self._budget = nbytes

    @property
    def paused(self) -> bool:
        return not self._flowing.is_set()

    def close(self) -> None:
        """Closes the listener and every relayed connection (both ends see them closed)."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._flowing.set()  # pumps holding a chunk finish: their writes fail on the closed sockets, nothing held goes

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                self.connections += 1
            for source, sink, direction in ((client, upstream, "up"), (upstream, client, "down")):
                threading.Thread(target=self._pump, args=(source, sink, direction), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, direction: str) -> None:
        while True:
            try:
                data = source.recv(1 << 16)
            except OSError:
                data = b""
            self._flowing.wait()
            try:
                if not data:  # the source closed: pass the end on (after a pause, like any byte)
                    sink.shutdown(socket.SHUT_WR)
                    return
                if direction == "up":
                    passing = self._spend(len(data))
                    if passing < len(data):  # the stall: the head goes, the rest waits for resume
                        self._send(sink, data[:passing], direction)
                        self._flowing.wait()
                        data = data[passing:]
                self._send(sink, data, direction)
            except OSError:
                return

    def _spend(self, size: int) -> int:
        """Bytes of a chunk of ``size`` that may go up before a stall; the stall begins when the budget is spent."""
        with self._lock:
            if self._budget is None:
                return size
            passing = min(size, self._budget)
            self._budget -= passing
            if self._budget == 0:
                self._budget, self.held = None, size - passing
                self._flowing.clear()
            return passing

    def _send(self, sink: socket.socket, data: bytes, direction: str) -> None:
        with self._lock:  # counted first: whoever has read bytes finds them counted
            self.forwarded[direction] += len(data)
        sink.sendall(data)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
