"""The broker process: network server, request handlers, wiring and ordered shutdown."""
