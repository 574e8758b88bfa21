"""What an output file records about how its events were made, and what it must never record.

A physicist who finds a feature in a histogram months later must be able to tell which model answered
(the digest of its files, not only its name), where (which servers, in-process, or the local fallback),
with how many events per call, and with which software. The job's configuration is recorded too,
with every value that looks like a secret replaced: an output is shared far more widely than the
configuration that made it (a token or a key in a ROOT file on a grid storage element is a leak).

``sonic merge`` compares the model digests of the pieces: outputs made by different models do not
belong in one file.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: a configuration key whose value is a secret (matched anywhere in the key, case-insensitively)
SECRET_KEY = re.compile(r"token|secret|passw|private_key|client_key|api_key|credential|auth|cookie|bearer", re.IGNORECASE)
REDACTED = "<redacted>"
#: the packages whose versions decide the numbers in an output
PACKAGES = ("sonic-hep", "numpy", "awkward", "uproot", "onnxruntime", "torch", "tritonclient", "grpcio",
            "nvidia-pytriton")


def redact(value: Any) -> Any:
    """``value`` with secrets replaced: the values of secret-like keys at any depth, the password of
    any URL (``https://user:pw@host``), and an ``Authorization``-style header value."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "", {}, [])
                else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and "@" in value and "://" in value:
        return _without_password(value)
    return value


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:{REDACTED}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def software_versions() -> dict[str, str]:
    """The installed versions of :data:`PACKAGES` (those present)."""
    import sys

    versions = {"python": sys.version.split()[0]}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def model_digests(metadata: dict[str, Any]) -> dict[str, str]:
    """``{model: digest}`` recorded in an output's metadata (empty for an output without inference)."""
    models = metadata.get("provenance", {}).get("inference", {}) or {}
    return {name: str(entry.get("digest")) for name, entry in models.items() if isinstance(entry, dict)}


def digest_conflicts(pieces: list[tuple[str, dict[str, Any]]]) -> str | None:
    """None when every piece that used a model used the same files; else the first model that differs,
    naming two pieces and their digests (``pieces``: ``(name, metadata)``)."""
    seen: dict[str, tuple[str, str]] = {}
    for name, metadata in pieces:
        for model, value in model_digests(metadata).items():
            first = seen.setdefault(model, (name, value))
            if first[1] != value:
                return f"model {model!r} differs: {first[0]} used {first[1]}, {name} used {value}"
    return None


def merged(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The provenance of a file merged from pieces with these records (digests already found equal):
    per model the answers summed and the modes joined; a setting that differed lists every value."""
    if not records:
        return {}
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for r in records for k in r):
        values = [r[key] for r in records if key in r]
        if key == "inference":
            out[key] = _merged_models(values)
        else:
            distinct = [v for i, v in enumerate(values) if v not in values[:i]]
            out[key] = distinct[0] if len(distinct) == 1 else distinct
    return out


def _merged_models(sections: list[dict[str, Any]]) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for section in sections:
        for model, entry in (section or {}).items():
            into = models.setdefault(model, {"mode": "", "digest": entry.get("digest"), "answers": {}})
            modes = set(filter(None, into["mode"].split("+"))) | set(str(entry.get("mode", "")).split("+"))
            into["mode"] = "+".join(sorted(filter(None, modes), reverse=True))
            for who, n in (entry.get("answers") or {}).items():
                into["answers"][who] = into["answers"].get(who, 0) + int(n)
    return models
