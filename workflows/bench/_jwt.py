"""JSON Web Tokens for benchmarks and tests: an RS256 issuer made with ``openssl`` (no token library needed), and
tokens whose every claim can be bent (expired, another audience, another issuer's key).

Why ``openssl``: the TLS tests already need it, and a proxy's token check is measured or tested against tokens
signed exactly as an identity provider signs them (RSASSA-PKCS1-v1_5 with SHA-256 over ``header.payload``)::

    issuer = Issuer.make(folder, "site")          # site.key (private), site.pub.pem (what the proxy verifies with)
    token = issuer.token(audience="my-fleet")     # valid 10 minutes
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ISSUER = "https://tokens.sonic-test.example"
AUDIENCE = "sonic-test-fleet"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class Issuer:
    """A private key (signs tokens) and its public half (what a proxy verifies with)."""

    key: Path
    public: Path

    @classmethod
    def make(cls, folder: Path, name: str) -> Issuer:
        """A new 2048-bit RSA key pair in ``folder`` (``openssl`` must be installed)."""
        key, public = Path(folder) / f"{name}.key", Path(folder) / f"{name}.pub.pem"
        for args in (["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)],
                     ["pkey", "-in", str(key), "-pubout", "-out", str(public)]):
            subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
        return cls(key, public)

    def token(self, lifetime_s: float = 600, audience: str = AUDIENCE, issuer: str = ISSUER, **claims: object) -> str:
        """A signed token valid for ``lifetime_s`` from now (negative: expired that long ago); ``claims`` add to
        or replace the standard ones."""
        now = int(time.time())
        payload = {"iss": issuer, "aud": audience, "sub": "sonic-test-job", "iat": now, "nbf": now - 60,
                   "exp": now + int(lifetime_s), "scope": "compute.read", **claims}
        signed = _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()) + "." + _b64(json.dumps(payload).encode())
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signed.encode(),
                                   check=True, capture_output=True, timeout=60).stdout
        return f"{signed}.{_b64(signature)}"
