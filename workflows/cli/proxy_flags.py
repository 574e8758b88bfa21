"""The flags of ``sonic fleet start`` that put a gRPC proxy in front of the fleet (``--proxy haproxy``).

Why apart from ``fleet.py``: they are checked together, before the fleet starts anything: a token rule without a
proxy, tokens that would cross the network in clear text, or a missing ``haproxy`` is one line and no fleet.
"""

from __future__ import annotations

import argparse
import os
import sys

from ...framework.inference.serving import ProxyOptions, TokenRules, preflight
from ..grid.errors import GridError

PROXIES = ("haproxy",)


def add_proxy_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("a gRPC proxy in front of the fleet (docs/site-operators.md)")
    group.add_argument("--proxy", choices=PROXIES, help="start this proxy in front of the servers: one address for "
                                                        "clients, stopped with the fleet")
    group.add_argument("--proxy-host", default="127.0.0.1", metavar="HOST",
                       help="address the proxy listens on (default 127.0.0.1; 0.0.0.0: every interface)")
    group.add_argument("--proxy-port", type=int, default=0, metavar="PORT", help="its port (default: a free one)")
    group.add_argument("--proxy-tls-cert", metavar="PEM", help="certificate the proxy presents (clients use TLS)")
    group.add_argument("--proxy-tls-key", metavar="PEM", help="that certificate's key")
    group.add_argument("--proxy-slots", type=int, default=32, metavar="N",
                       help="servers the proxy can hold at once (default 32)")
    group.add_argument("--token-key", metavar="PEM", help="require bearer tokens (JWT, RS256) signed with this "
                                                          "public key or certificate of the issuer")
    group.add_argument("--token-issuer", metavar="ISS", help="the issuer (iss) every token must name")
    group.add_argument("--token-audience", metavar="AUD", help="the audience (aud) every token must name")


def proxy_options(args: argparse.Namespace) -> ProxyOptions | None:
    """The proxy asked for (None without ``--proxy``), checked, HAProxy looked for, before the fleet starts.

    Raises:
        GridError: one line naming the flag to fix.
    """
    tokens_asked = any((args.token_key, args.token_issuer, args.token_audience))
    if not args.proxy:
        given = [flag for flag, value in (("--token-key", args.token_key), ("--proxy-tls-cert", args.proxy_tls_cert),
                                          ("--proxy-port", args.proxy_port)) if value]
        if given or tokens_asked:
            raise GridError(f"{(given or ['--token-issuer/--token-audience'])[0]} needs a proxy: add --proxy haproxy")
        return None
    if tokens_asked and not args.token_key:
        raise GridError("--token-issuer/--token-audience need --token-key (the issuer's public key, PEM)")
    tokens = TokenRules(_abs(args.token_key), args.token_issuer or "", args.token_audience or "") \
        if args.token_key else None
    options = ProxyOptions(args.proxy_host, args.proxy_port, _abs(args.proxy_tls_cert), _abs(args.proxy_tls_key),
                           tokens, args.proxy_slots)
    problem, warning = preflight(options, args.host or "0.0.0.0")
    if problem:
        raise GridError(problem)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return options


def _abs(path: str | None) -> str:
    return os.path.abspath(path) if path else ""
