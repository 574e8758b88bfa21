"""When gRPC compression of SONIC requests pays: the link rate below which a job runs faster with it.

Compression trades CPU for bytes (``services.inference.compression``). Per event, a job moves ``B`` bytes over the
link without it and ``B / r`` with it (``r``: the compression ratio measured on the wire), and compressing and
decompressing cost ``c`` seconds of CPU per event, the job's and the server's together. While an event's transfers
are on its critical path (one stream, or a link too narrow for the events in flight to hide them), its time over a
link of ``R`` bytes/s is ``T_0 + B / R`` without compression and ``T_0 + c + B / (r R)`` with it, so compression
wins below

    R* = B (1 - 1/r) / c

the **job's share** of the link: a link of ``L`` shared by ``N`` jobs gives each ``L / N``, so it pays once more
than ``L / R*`` jobs share it. Where many jobs fill a link (``plan.py``'s job cap for a link), compression carries
``r`` times as many jobs on it, for ``c`` of CPU per event (mostly the job's; the server's part lowers the jobs a
server feeds a little). ``sonic bench compression`` measures ``r`` and ``c`` per workflow and checks ``R*`` on
shaped links.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .errors import GridError


@dataclass(frozen=True)
class CompressionPays:
    """The verdict for one job and one algorithm.

    Args:
        bytes_per_event: bytes over the link per event without compression (both ways).
        ratio: those bytes over the bytes with compression (above 1 when it shrinks them).
        cpu_s_per_event: CPU seconds compression adds per event, job and server together.
        break_even_bytes_per_s: ``R*`` (None when compression saves nothing; infinite when it costs nothing).
    """

    bytes_per_event: float
    ratio: float
    cpu_s_per_event: float
    break_even_bytes_per_s: float | None

    @property
    def break_even_mbit(self) -> float | None:
        """``R*`` in Mb/s, as links are quoted."""
        return None if self.break_even_bytes_per_s is None else self.break_even_bytes_per_s * 8 / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "break_even_mbit": self.break_even_mbit}


def compression_pays(bytes_per_event: float, ratio: float, cpu_s_per_event: float) -> CompressionPays:
    """``R*`` from the bytes per event, the compression ratio and its CPU per event (see the module docstring).

    Example::

        compression_pays(4e6, 4.0, 0.05).break_even_mbit   # 480.0: below 480 Mb/s per job, compress

    Raises:
        GridError: a ratio or bytes that are not positive, or a negative CPU cost (one line).
    """
    if not bytes_per_event > 0 or not ratio > 0:
        raise GridError(f"compression: bytes per event and the ratio must be positive, not {bytes_per_event} and "
                        f"{ratio}")
    if cpu_s_per_event < 0 or math.isnan(cpu_s_per_event):
        raise GridError(f"compression: its CPU per event cannot be negative, not {cpu_s_per_event}")
    saved = bytes_per_event * (1 - 1 / ratio)
    if saved <= 0:
        rate = None
    else:
        rate = saved / cpu_s_per_event if cpu_s_per_event > 0 else math.inf
    return CompressionPays(bytes_per_event, ratio, cpu_s_per_event, rate)


def time_per_event(base_s: float, bytes_per_event: float, rate_mbit: float, ratio: float = 1.0,
                   cpu_s: float = 0.0) -> float:
    """An event's time over a link of ``rate_mbit`` when its transfers are on its critical path: the time
    without the link, plus what compression costs, plus its bytes (``/ ratio`` when compressed) at the rate."""
    return base_s + cpu_s + bytes_per_event / ratio / (rate_mbit * 1e6 / 8)


def report_lines(result: CompressionPays, link_gbps: float, link_job_cap: int | None = None) -> list[str]:
    """The verdict as ``sonic plan`` prints it."""
    lines = [f"  compression: ratio {result.ratio:.2f}, {1000 * result.cpu_s_per_event:.3f} ms of CPU per event "
             f"(job + server)"]
    rate = result.break_even_mbit
    if rate is None:
        lines.append("  compression never pays: it does not shrink these bytes")
        return lines
    if math.isinf(rate):
        lines.append("  compression pays at every rate: it costs no measurable CPU")
    else:
        lines.append(f"  compression pays below R* = B (1 - 1/r) / c = {rate:.1f} Mb/s per job: on this "
                     f"{link_gbps:g} Gb/s link, once more than {link_gbps * 1000 / rate:.0f} jobs share it")
    if link_job_cap is not None:
        lines.append(f"  with compression the link carries {math.floor(link_job_cap * result.ratio)} jobs "
                     f"(cap x r), for the CPU above")
    return lines
