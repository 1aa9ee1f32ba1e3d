"""Failures in the command line's words: a cause and the flag that fixes it.

The library speaks Python (``protocol='delta'``) and passes on gRPC's text
("Socket closed", "WRONG_VERSION_NUMBER"); a user of ``xds-client`` wants the
option to change. :func:`cli_words` rewrites a one-line message; :func:`explain`
turns a stream's failure reason into a cause with a hint.
"""

from __future__ import annotations

import re

from ._args import CommandError

__all__ = ["check_pem", "cli_words", "explain"]

# (pattern in the library's message, replacement in CLI words)
_WORDS = (
    (re.compile(r"use protocol='delta'"), "use --delta"),
    (
        re.compile(r"use transport='grpc' for delta( xDS)?"),
        "fetch polls SotW only; use watch --delta",
    ),
    (re.compile(r", or register\(\) it"), ""),
    (re.compile(r"or message class"), "or message name"),
    (re.compile(r"; set GRPC_VERBOSITY=debug environment variable to see detailed .*"), ""),
    (
        re.compile(r"Failed to bind to address (\S+)"),
        r"\1 is in use, or not an address of this host",
    ),
)
# Types people spell as words: the alias they meant.
_TYPE_WORDS = {
    "listener": "lds", "listeners": "lds", "route": "rds", "routes": "rds",
    "cluster": "cds", "clusters": "cds", "endpoint": "eds", "endpoints": "eds",
    "secret": "sds", "secrets": "sds", "runtime": "rtds",
}  # fmt: skip
_UNKNOWN_TYPE = re.compile(r"unknown xDS resource type '([^']*)'")
_NOT_PRINTABLE = re.compile(r"[^\t\x20-\x7e\u00a0-\uffff]+")


def cli_words(text: str) -> str:
    """``text`` with the library's Python spellings replaced by flags; no control bytes."""
    for pattern, words in _WORDS:
        text = pattern.sub(words, text)
    unknown = _UNKNOWN_TYPE.search(text)
    if unknown and unknown.group(1).lower() in _TYPE_WORDS:
        text += f" (did you mean {_TYPE_WORDS[unknown.group(1).lower()]!r}?)"
    text = re.sub(r"BadStatusLine:.*", "the reply is not HTTP/1.1", text)
    return _NOT_PRINTABLE.sub("?", text)


def explain(server: str, reason: str, *, tls: bool) -> str:
    """Why a stream to ``server`` failed, with the flag to try; ``tls``: TLS was asked for."""
    low = reason.lower()
    if "unimplemented" in low and ("method not found" in low or "unary fetch" in low):
        if "unary fetch" in low:
            return (
                f"{server} does not serve unary Fetch for this type (UNIMPLEMENTED): it is "
                "not an xDS server, or it serves only streams (try xds-client watch)"
            )
        return f"{server} is not an xDS server (it answers UNIMPLEMENTED to the xDS stream)"
    if "badstatusline" in low or "remotedisconnected" in low:
        return (
            f"{server} does not answer REST-JSON (HTTP/1.1): if it is a gRPC port, "
            "use --transport grpc-fetch with -s HOST:PORT"
        )
    if "failed to create security handshaker" in low or "handshaker factory" in low:
        return (
            f"cannot set up TLS for {server}: check that --ca-file, --cert and --key "
            "are PEM files (a certificate, a chain and its private key)"
        )
    if "wrong_version_number" in low or ("tls handshake failed" in low and "ssl" in low and tls):
        if "certificate_verify_failed" in low or "certificate verify failed" in low:
            return _untrusted(server)
        return (
            f"{server} does not speak TLS (the handshake got plaintext back): "
            "drop --tls / --ca-file, or use the server's TLS port"
        )
    if "certificate_verify_failed" in low or "certificate verify failed" in low:
        return _untrusted(server)
    if any(m in low for m in ("not in peer certificate", "hostname mismatch", "hostname verif")):
        return (
            f"the certificate of {server} is for another name: "
            "give the name it is issued for with --server-name NAME"
        )
    if (
        "certificate required" in low
        or "certificate_required" in low
        or "peer did not return" in low
    ):
        return f"{server} wants a client certificate (mTLS): add --cert PEM --key PEM"
    closed = "socket closed" in low or "connection reset" in low
    if tls and closed:
        return (
            f"{server} closed the connection during the TLS handshake: if it wants a client "
            "certificate (mTLS), add --cert PEM --key PEM"
        )
    if not tls and (closed or "handshake" in low):
        return (
            f"{server} closed the connection before any xDS answer: if it serves TLS, "
            "add --tls (the system's CAs) or --ca-file PEM"
        )
    if "connection refused" in low:
        return f"cannot reach xDS server {server}: connection refused (is it running on that port?)"
    return f"cannot reach xDS server {server}: {cli_words(reason)}"


def _untrusted(server: str) -> str:
    return (
        f"the certificate of {server} is not trusted: give the CA that signed it with "
        "--ca-file PEM (and --server-name NAME if it is issued for another name)"
    )


def check_pem(data: bytes, flag: str, path: str, *, key: bool = False) -> None:
    """A file given to a TLS flag must be PEM: say which flag, before gRPC logs about it."""
    what = "PRIVATE KEY" if key else "CERTIFICATE"
    if b"-----BEGIN " not in data or (what.encode() not in data):
        raise CommandError(f"{flag} {path} is not a PEM file with a {what.lower()}", 2)
