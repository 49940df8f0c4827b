"""Command-line entry points (`riverlog ...`)."""
