"""Driving a CPU target host over SSH (Fabric): verified host keys, the engine bundle, remote runs fetched
into catalog/runs/ and recorded with DVC. The Fabric tasks (`fab -H nuc16 measure`) live in tasks.py.

The top layer: it may import anything below, the CLI included.
"""
