"""The error of security settings that cannot be honoured (a ValueError; the broker turns it
into its ConfigError, a client raises it from its constructor)."""


class SecurityConfigError(ValueError):
    """A security setting that is missing, malformed or cannot be honoured."""
