"""Record data (`FileRegion`: bytes in a segment file) on its way to a client socket, for
`server/network.py`'s `Connection`: `sendfile_now` sends what a plaintext socket takes at
once with `os.sendfile` (no copy through Python); `without_regions` reads each region once
with `os.pread` for a TLS transport, through which sendfile cannot go.

Invariants. `sendfile_now` never waits and never raises: it returns how many bytes went,
and what it could not send (socket full, an error, a file shorter than the region) is left
to the caller's `loop.sendfile`. `without_regions` returns its input list itself when it
holds no region, and raises `OSError` when a segment is shorter than the region to send.
"""

from __future__ import annotations

import os
import socket

from riverlog.protocol.primitives import Chunk, FileRegion


def sendfile_now(sock: socket.socket, region: FileRegion) -> int:
    """Send what the socket takes of `region` without waiting; `loop.sendfile` would first
    pause reading, register for writability and build futures even when one call sends
    everything. Errors are left to `loop.sendfile`, which the caller goes on with."""
    sent = 0
    while sent < region.length:
        try:
            n = os.sendfile(
                sock.fileno(), region.fileno, region.offset + sent, region.length - sent
            )
        except OSError:  # full (EAGAIN), or failing
            break
        if n == 0:  # the file is shorter than the region
            break
        sent += n
    return sent


def without_regions(chunks: list[Chunk]) -> list[Chunk]:
    """Record data read once from its segment, for a TLS transport (no sendfile)."""
    if FileRegion not in map(type, chunks):
        return chunks
    out: list[Chunk] = []
    for chunk in chunks:
        if isinstance(chunk, FileRegion):
            data = os.pread(chunk.fileno, chunk.length, chunk.offset)
            if len(data) < chunk.length:
                raise OSError("a segment is shorter than the record data to send")
            out.append(data)
        else:
            out.append(chunk)
    return out
