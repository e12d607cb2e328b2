"""Who listens on a TCP port of this machine (Linux /proc): the sockets listening where a connection to
127.0.0.1 lands, and the sockets a process holds."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from pathlib import Path


def listeners(port: int) -> set[int]:
    """Inodes of the TCP sockets listening on `port` where a connection to 127.0.0.1 can land (127.0.0.1 or a
    wildcard address), from /proc/net/tcp and tcp6 (addresses in the host's byte order)."""
    reach = {"127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1"}
    found = set()
    for family, table in ((socket.AF_INET, "tcp"), (socket.AF_INET6, "tcp6")):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                address, hex_port = fields[1].split(":")
                if fields[3] != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                    continue
                raw = b"".join(struct.pack("=I", int(address[i : i + 8], 16)) for i in range(0, len(address), 8))
                if socket.inet_ntop(family, raw) in reach:
                    found.add(int(fields[9]))
    return found


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets a process holds open."""
    found = set()
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if (target := os.readlink(fd)).startswith("socket:["):
                    found.add(int(target[8:-1]))
    return found
