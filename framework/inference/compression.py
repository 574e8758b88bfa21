"""gRPC message compression of SONIC requests: which algorithm each model's requests use, and the codec.

Why: over a narrow or shared link, bytes decide a SONIC job's time (ProtoDUNE's paper: 1.9 s of its 12 s per
event is bandwidth), and detector inputs (zero-padded features, sparse ADC patches) compress well. The
choices are CMSSW SonicTriton's (its client's ``compression``: none, deflate, gzip), per client
(``services.inference.compression``) and per model (``model_compression``, which wins). What it costs is
CPU on both ends, so it pays only below some link rate (``sonic plan`` says which, from measured numbers).

gRPC's encodings (the ``grpc-encoding`` header, and a flag byte per message): ``gzip`` is RFC 1952, ``deflate``
is the zlib stream of RFC 1950 (not a raw deflate stream), both at zlib's default level as gRPC's own core
compresses. As gRPC's core does, a message that does not get smaller is sent as it is (flag 0). grpcio does
all of this itself; the native transport uses :func:`compress` and :func:`decompress`. Python's zlib lets the
interpreter lock go while it works, so compressing on the caller's thread holds up no other stream long.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError

#: the algorithms a user may choose, as SonicTriton names them
ALGORITHMS = ("none", "gzip", "deflate")
#: zlib's window bits for each encoding: 15 a zlib stream (gRPC's deflate), 31 a gzip member
_WBITS = {"deflate": 15, "gzip": 31}
#: zlib's default level, what gRPC's core uses
LEVEL = 6


def checked(name: object, key: str) -> str:
    """``name`` if it is an algorithm; else a one-line :class:`ConfigError` naming ``key`` and the choices."""
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown compression algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}", key=key)
    return str(name)


@dataclass(frozen=True)
class Compression:
    """The compression of each model's requests: ``models[name]`` where given, else ``default``.

    Raises:
        ConfigError: an unknown algorithm, naming its setting.
    """

    default: str = "none"
    models: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checked(self.default, "services.inference.compression")
        for model, name in self.models.items():
            checked(name, f"services.inference.model_compression.{model}")

    @classmethod
    def of(cls, value: Compression | str | None) -> Compression:
        """A :class:`Compression` from itself, an algorithm's name (every model alike) or None (none)."""
        if isinstance(value, Compression):
            return value
        return cls(value or "none")

    def for_model(self, model: str) -> str:
        return self.models.get(model, self.default)

    @property
    def used(self) -> bool:
        """Whether any model's requests are compressed."""
        return self.default != "none" or any(name != "none" for name in self.models.values())


def compress(message: bytes, algorithm: str) -> bytes | None:
    """``message`` in ``algorithm``'s encoding, or None when that is not smaller (then it goes as it is)."""
    if algorithm == "none":
        return None
    packed = zlib.compress(message, LEVEL, _WBITS[algorithm])
    return packed if len(packed) < len(message) else None


def decompress(body: bytes, encoding: str) -> bytes:
    """A message the server compressed (its ``grpc-encoding``).

    Raises:
        ValueError: an encoding this client does not know, or a body that is not in it (one line).
    """
    if encoding not in _WBITS:
        raise ValueError(f"the answer is compressed with {encoding or 'no declared encoding'!r}, which this client "
                         f"does not decode (it accepts {', '.join(_WBITS)})")
    try:
        return zlib.decompress(body, _WBITS[encoding])
    except zlib.error as err:
        raise ValueError(f"the answer's {encoding} message does not decompress: {err}") from None
