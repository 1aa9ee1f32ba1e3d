"""A grpcio xDS-enabled server (gRFC A36) for the interop tests (run as a subprocess).

Usage: grpc_xds_server_peer.py PORT

Needs GRPC_XDS_BOOTSTRAP with ``server_listener_resource_name_template``. Serves
``/interop.Echo/Who`` on 127.0.0.1:PORT with xDS-managed filter chains and prints
``serving`` / ``not serving ...`` lines as its serving state changes.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import grpc


def main() -> None:
    port = int(sys.argv[1])

    def who(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "interop.Echo", {"Who": grpc.unary_unary_rpc_method_handler(who)}
    )
    with ThreadPoolExecutor(4) as executor:
        server = grpc.server(executor, handlers=[handler], xds=True)
        credentials = grpc.xds_server_credentials(grpc.insecure_server_credentials())
        server.add_secure_port(f"127.0.0.1:{port}", credentials)
        server.start()
        print("started", flush=True)
        server.wait_for_termination()


if __name__ == "__main__":
    main()
