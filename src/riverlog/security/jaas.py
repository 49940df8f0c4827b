"""Kafka's JAAS configuration lines (`sasl.jaas.config`), parsed.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

Grammar (Kafka's JaasConfig): one or more entries `<login module class> <flag> [key=value]*
;` with flag one of required, requisite, sufficient, optional; values are double-quoted
strings (backslash escapes the next character) or bare words. Anything else is a ConfigError
naming where it failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from riverlog.security.errors import SecurityConfigError as ConfigError

FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def users(self) -> dict[str, str]:
        """PLAIN's `user_<name>="<password>"` options: name → password."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and k[5:]}


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(token, was quoted) pairs; `=` and `;` are tokens of their own."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, False))
            i += 1
        elif c == '"':
            i += 1
            chars = []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(text[i])
                i += 1
            if i >= n:
                raise ConfigError("sasl.jaas.config: unterminated quoted value")
            out.append(("".join(chars), True))
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            out.append((text[start:i], False))
    return out


def parse(text: str) -> list[LoginModule]:
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens):
            raise ConfigError(f"sasl.jaas.config: incomplete entry at {tokens[i][0]!r}")
        class_name, flag = tokens[i][0], tokens[i + 1][0].lower()
        if flag not in FLAGS:
            raise ConfigError(f"sasl.jaas.config: invalid control flag {tokens[i + 1][0]!r}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i] != (";", False):
            if i + 2 >= len(tokens) or tokens[i + 1] != ("=", False):
                raise ConfigError(f"sasl.jaas.config: expected key=value at {tokens[i][0]!r}")
            options[tokens[i][0]] = tokens[i + 2][0]
            i += 3
        if i >= len(tokens):
            raise ConfigError("sasl.jaas.config: an entry must end with ';'")
        i += 1
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise ConfigError("sasl.jaas.config: no login module")
    return modules


def module(text: str, class_name: str) -> LoginModule:
    for found in parse(text):
        if found.class_name == class_name:
            return found
    raise ConfigError(f"sasl.jaas.config: no {class_name.rsplit('.', 1)[-1]} entry")
