"""What really listens where: the kernel's socket tables, not what a command line asked for.

A banner that prints the address we *asked* for can lie (the issue's ``--host 0.0.0.0`` banner said
``127.0.0.1`` while HTTP listened everywhere); an error that says a port was "taken meanwhile" names
nobody. Both read ``/proc/net/tcp{,6}``::

    listening(server.pid)          # [("0.0.0.0", 8001), ("127.0.0.1", 8000), ("127.0.0.1", 8002)]
    port_holder(8001)              # "pid 4242 (tritonserver --grpc-port=8001 ...)" or None
    bind_problem("127.0.0.1", 8001)  # "port 8001 on 127.0.0.1 is already in use by pid 4242 (...)"
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from pathlib import Path

_LISTEN = "0A"


def _address(hex_address: str) -> tuple[str, int]:
    """``("127.0.0.1", 8001)`` from the kernel's ``0100007F:1F41`` (IPv6: four little-endian words)."""
    host_hex, port_hex = hex_address.split(":")
    raw = bytes.fromhex(host_hex)
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(packed)
    mapped = getattr(address, "ipv4_mapped", None)  # gRPC listens on IPv6 sockets: ::ffff:127.0.0.1
    return str(mapped or address), int(port_hex, 16)


def listening_table() -> dict[int, tuple[str, int]]:
    """``{socket inode: (host, port)}`` of every listening TCP socket of this network namespace."""
    table = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN:
                table[int(fields[9])] = _address(fields[1])
    return table


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def listening(pid: int) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs process ``pid`` listens on, sorted by port."""
    table = listening_table()
    return sorted({table[i] for i in _socket_inodes(pid) if i in table}, key=lambda hp: (hp[1], hp[0]))


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    args = [p.decode(errors="replace") for p in raw.split(b"\0") if p]
    return " ".join([os.path.basename(args[0]), *args[1:]]) if args else ""


def port_holder(port: int) -> str | None:
    """``"pid N (command)"`` of a process listening on ``port`` (any address), when this user can see it."""
    inodes = {inode for inode, (_, p) in listening_table().items() if p == port}
    if not inodes:
        return None
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _socket_inodes(int(entry)) & inodes:
            command = _command(int(entry))
            return f"pid {entry} ({command[:80]})" if command else f"pid {entry}"
    return "a process of another user"


def bind_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port`` (None when it can, right now).

    Binds a throw-away socket the way servers do (``SO_REUSEADDR``, so connections of a former holder in
    TIME_WAIT do not count) and, when the port is taken, names whoever holds it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                holder = port_holder(port)
                return f"port {port} on {host} is already in use" + (f" by {holder}" if holder else "")
            return f"cannot listen on {host}:{port}: {err.strerror}"
    return None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches (127.0.0.0/8, ::1, "localhost")."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (another process may still take it before we bind)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def host_port(host: str, port: int | str) -> str:
    """``host:port``, with brackets around an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
