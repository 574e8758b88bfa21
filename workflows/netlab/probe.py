"""What a lab link really does, measured with plain TCP: round trips, and the time to move N bytes each way.

The lab verifies every link it makes with these (a shaped rate, a relay's delay) and measures the relay's
own cost per round trip. One side runs ``serve`` in the server's namespace, the other ``measure`` in the
jobs' namespace; ``measure`` prints one JSON line::

    python -m sonic_hep.workflows.netlab.probe serve 10.77.0.1:7007
    python -m sonic_hep.workflows.netlab.probe measure 10.77.0.1:7007 --pings 20 --upload 2000000

Protocol on one connection: a request is one byte (``P`` ping, ``U`` upload, ``D`` download) and an
8-byte big-endian length; ``P`` is answered with the same 9 bytes, ``U`` with one byte once the length has
arrived, ``D`` with that many bytes.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time

HEADER = struct.Struct("!cQ")
BLOCK = 1 << 16


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    parts, left = [], size
    while left:
        data = sock.recv(min(left, 1 << 20))
        if not data:
            raise ConnectionError("peer closed")
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _drain(sock: socket.socket, size: int) -> None:
    buffer = bytearray(1 << 20)
    left = size
    while left:
        got = sock.recv_into(buffer, min(left, len(buffer)))
        if not got:
            raise ConnectionError("peer closed")
        left -= got


def _answer(conn: socket.socket) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        zeros = bytes(BLOCK)
        try:
            while True:
                head = _read_exactly(conn, HEADER.size)
                op, size = HEADER.unpack(head)
                if op == b"P":
                    conn.sendall(head)
                elif op == b"U":
                    _drain(conn, size)
                    conn.sendall(b"k")
                elif op == b"D":
                    left = size
                    while left:
                        conn.sendall(zeros[:min(left, BLOCK)])
                        left -= min(left, BLOCK)
        except (ConnectionError, OSError):
            return


def serve(address: str) -> None:
    """Answers probes on ``address`` until killed."""
    host, _, port = address.rpartition(":")
    listener = socket.create_server((host, int(port)), reuse_port=False)
    print("probe ready", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_answer, args=(conn,), daemon=True).start()


def measure(address: str, pings: int = 10, upload: int = 0, download: int = 0, timeout: float = 120.0) -> dict:
    """Round trips (ms, each one) and upload / download seconds of the given byte counts, on one connection
    (its set-up not counted)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(pings):
            start = time.perf_counter()
            sock.sendall(HEADER.pack(b"P", 0))
            _read_exactly(sock, HEADER.size)
            rtts.append(1000 * (time.perf_counter() - start))
        result: dict = {"rtt_ms": rtts}
        if upload:
            zeros = bytes(BLOCK)
            start = time.perf_counter()
            sock.sendall(HEADER.pack(b"U", upload))
            left = upload
            while left:
                sock.sendall(zeros[:min(left, BLOCK)])
                left -= min(left, BLOCK)
            _read_exactly(sock, 1)
            result["upload_s"] = time.perf_counter() - start
        if download:
            start = time.perf_counter()
            sock.sendall(HEADER.pack(b"D", download))
            _drain(sock, download)
            result["download_s"] = time.perf_counter() - start
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sonic_hep.workflows.netlab.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve").add_argument("address")
    m = sub.add_parser("measure")
    m.add_argument("address")
    m.add_argument("--pings", type=int, default=10)
    m.add_argument("--upload", type=int, default=0, help="bytes to send")
    m.add_argument("--download", type=int, default=0, help="bytes to receive")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.address)
        return 0
    print(json.dumps(measure(args.address, args.pings, args.upload, args.download)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
