"""What a lab link is (rate, round trip, jitter, loss) and the ``tc`` commands that make it in the kernel.

A :class:`Link` is written the way an operator says it: ``rate=100mbit,rtt=50ms,jitter=5ms,loss=0.1%``
(:meth:`Link.parse`); every field is optional and 0 means "not limited / none". The kernel shapes the rate
(``htb`` on each end of the veth pair: the jobs' end shapes what jobs send, the server's end what they
receive) and drops packets at random for loss (a classic-BPF classifier reading the kernel's random number
and sending the chosen packets to a class whose queue holds none: no ``netem`` needed). Delay and jitter are
``netem``'s where the kernel has it; elsewhere the lab puts a relay in user space in the path
(``relay.py``). Only the command lists are built here; ``lab.py`` runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...framework.errors import SonicError

#: units of a rate as ``tc`` spells them, in bits per second
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
#: an htb class's burst: at least two GSO packets (a veth passes 64 KiB segments), else about 1 ms at the rate
_MIN_BURST = 2 * 65536


@dataclass(frozen=True)
class Link:
    """One lab link, the same both ways.

    Args:
        rate_mbit (float): bandwidth each way in Mb/s (0: not shaped).
        rtt_ms (float): round trip added to the veth's own (0: none).
        jitter_ms (float): spread of each direction's delay (uniform ± this; order kept, as TCP sees it).
        loss (float): fraction of packets dropped each way (0.001 is 0.1 %).
    """

    rate_mbit: float = 0.0
    rtt_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0

    def __post_init__(self) -> None:
        for name in ("rate_mbit", "rtt_ms", "jitter_ms", "loss"):
            if getattr(self, name) < 0:
                raise SonicError(f"network link: {name} must not be negative, not {getattr(self, name)}")
        if self.loss >= 1:
            raise SonicError(f"network link: loss is a fraction below 1 (0.01 is 1 %), not {self.loss}")

    @classmethod
    def parse(cls, text: str) -> Link:
        """``rate=100mbit,rtt=50ms,jitter=5ms,loss=0.1%`` (any subset; ``rate=10gbit``, ``loss=0.001`` too).

        Raises:
            SonicError: naming the part that cannot be read.
        """
        fields: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            key, value = key.strip().lower(), value.strip().lower()
            try:
                if key == "rate":
                    fields["rate_mbit"] = parse_rate_mbit(value)
                elif key in ("rtt", "jitter"):
                    fields[f"{key}_ms"] = float(value.removesuffix("ms"))
                elif key == "loss":
                    fields["loss"] = float(value[:-1]) / 100 if value.endswith("%") else float(value)
                else:
                    raise SonicError(f"network link {text!r}: unknown key {key!r} (rate, rtt, jitter, loss)")
            except ValueError:
                raise SonicError(f"network link {text!r}: cannot read {part!r}") from None
        return cls(**fields)

    def describe(self) -> str:
        """``100 Mb/s, RTT 50 ms ± 5 ms, loss 0.1 %`` (parts at 0 left out; ``unshaped`` when all are)."""
        parts = []
        if self.rate_mbit:
            parts.append(f"{self.rate_mbit / 1000:g} Gb/s" if self.rate_mbit >= 1000 else f"{self.rate_mbit:g} Mb/s")
        if self.rtt_ms or self.jitter_ms:
            parts.append(f"RTT {self.rtt_ms:g} ms" + (f" ± {self.jitter_ms:g} ms" if self.jitter_ms else ""))
        if self.loss:
            parts.append(f"loss {100 * self.loss:g} %")
        return ", ".join(parts) or "unshaped"

    @property
    def delays(self) -> bool:
        """Whether the link adds delay or jitter (a relay's or netem's work)."""
        return bool(self.rtt_ms or self.jitter_ms)


def parse_rate_mbit(text: str) -> float:
    """``100mbit`` → 100.0, ``10gbit`` → 10000.0; a bare number is Mb/s."""
    found = re.fullmatch(r"([0-9.]+)\s*([a-z]*)", text.strip().lower())
    if not found:
        raise ValueError(text)
    number, unit = float(found.group(1)), found.group(2) or "mbit"
    if unit not in _RATE_UNITS:
        raise ValueError(text)
    return number * _RATE_UNITS[unit] / 1e6


def shaping_commands(device: str, link: Link, netem: bool = False, drop_all: bool = False) -> list[list[str]]:
    """``tc`` commands (run inside the device's namespace) that give ``device``'s egress the link's rate and
    loss, and, with ``netem``, half the round trip as netem's delay (with the jitter); ``drop_all`` drops every
    packet (a silent partition). Starts from no qdisc at all, so the same list reshapes a link (after
    :func:`clear_command`).

    The tree: ``htb`` root, default class 1:1 at the rate (100 Gb/s when unshaped: htb needs one) holding
    ``netem`` when delaying, else a FIFO; with loss, a filter sends that fraction of packets to class 1:2,
    whose FIFO holds no packet, so each one is dropped.
    """
    rate = link.rate_mbit or 100_000.0
    burst = max(_MIN_BURST, int(rate * 1e6 / 8 / 1000))  # ~1 ms at the rate
    commands = [["tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "1"],
                ["tc", "class", "add", "dev", device, "parent", "1:", "classid", "1:1", "htb", "rate",
                 f"{rate:g}mbit", "ceil", f"{rate:g}mbit", "burst", str(burst), "cburst", str(burst), "quantum", "65536"]]
    if netem and link.delays:
        commands.append(["tc", "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:", "netem", "limit",
                         "100000", "delay", f"{link.rtt_ms / 2:g}ms", *([f"{link.jitter_ms:g}ms"] if link.jitter_ms else [])])
    if link.loss or drop_all:
        commands += [["tc", "class", "add", "dev", device, "parent", "1:", "classid", "1:2", "htb", "rate",
                      f"{rate:g}mbit", "quantum", "65536"],
                     ["tc", "qdisc", "add", "dev", device, "parent", "1:2", "handle", "2:", "pfifo", "limit", "0"],
                     ["tc", "filter", "add", "dev", device, "parent", "1:", "prio", "1", "bpf", "bytecode",
                      DROP_ALL if drop_all else loss_bytecode(link.loss)]]
    return commands


def clear_command(device: str) -> list[str]:
    """Removes the device's root qdisc (and so everything under it); fails harmlessly when there is none."""
    return ["tc", "qdisc", "del", "dev", device, "root"]


#: classic BPF: ``A = a random u32`` (the kernel's ancillary load SKF_AD_OFF + SKF_AD_RANDOM)
_LOAD_RANDOM = "32 0 0 4294963256"
_DROP_CLASS, _PASS_CLASS = 0x10002, 0x10001  # 1:2 and 1:1
#: every packet to the dropping class
DROP_ALL = f"1,6 0 0 {_DROP_CLASS}"


def loss_bytecode(fraction: float) -> str:
    """The classifier for ``tc filter ... bpf bytecode``: a packet goes to the dropping class 1:2 when a random
    32-bit number falls below ``fraction`` of its range, else to 1:1."""
    threshold = min(2**32 - 1, round(fraction * 2**32))
    program = [_LOAD_RANDOM, f"53 1 0 {threshold}", f"6 0 0 {_DROP_CLASS}", f"6 0 0 {_PASS_CLASS}"]
    return f"{len(program)}," + ",".join(program)
