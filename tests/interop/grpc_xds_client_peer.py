"""A grpcio xDS client for the interop tests (run as a subprocess).

Usage: grpc_xds_client_peer.py TARGET SECONDS

Needs GRPC_XDS_BOOTSTRAP. Calls ``/interop.Echo/Who`` on ``TARGET`` (for
example ``xds:///my-service``) until SECONDS pass and prints one line per
call: the answering backend's name, or ``error <code>``.
"""

from __future__ import annotations

import sys
import threading
import time

import grpc


def main() -> None:
    target, seconds = sys.argv[1], float(sys.argv[2])
    deadline = time.monotonic() + seconds
    pace = threading.Event()  # never set: a bounded pause between calls
    with grpc.insecure_channel(target) as channel:
        who: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/interop.Echo/Who")
        while time.monotonic() < deadline:
            try:
                answer = who(b"", timeout=2.0, wait_for_ready=True)
                print(answer.decode(), flush=True)
            except grpc.RpcError as exc:
                print(f"error {exc.code().name}", flush=True)
            pace.wait(0.05)


if __name__ == "__main__":
    main()
