"""The SONIC data plane's compiled transport (gRPC over HTTP/2 on libnghttp2): ``native.py`` builds and drives it."""
