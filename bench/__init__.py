"""Benchmarks of xds_client against the raw grpcio/protobuf loop (``make bench``).

Every scenario runs the SDK and a raw loop (generated stub, protobuf decode, a
plain dict) in the same run, against the same server running in a separate
process, and reports medians and the ratio SDK/raw. See docs/performance.md.
"""
