"""Resolves the host named in SLIPWAY_RESOLVE=<host>=<ip> to <ip>, in any Python program started with this folder
on PYTHONPATH (Python imports `sitecustomize` at start): a channel's public endpoint's name exists only in the
test, and the S3 clients driven against it (boto3, s3-tests, the aws CLI) resolve it here."""

import os
import socket

_resolve = os.environ.get("SLIPWAY_RESOLVE")
if _resolve:
    _name, _ip = _resolve.split("=", 1)
    _real_getaddrinfo = socket.getaddrinfo

    def _getaddrinfo(host, *args, **kwargs):
        return _real_getaddrinfo(_ip if host == _name else host, *args, **kwargs)

    socket.getaddrinfo = _getaddrinfo
