"""One broker's partition logs on disk: plain file I/O, no asyncio, no sockets."""
