"""The Apache Kafka wire protocol, sans I/O.

Bytes in, typed objects out, and back: primitives, generated message classes for every API
version, request/response headers and framing, record batches and error codes. Nothing in this
package opens a socket, a file or an event loop.
"""
