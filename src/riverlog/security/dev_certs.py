"""Throwaway certificates for development clusters and tests (trustme's CA).

`write_dev_certs(dir)` writes, as PEM files: `ca.pem` (the CA to trust), `broker.pem` (key
and chain for 127.0.0.1 / localhost), `client.pem` (key and chain of the client identity
`CN=client,OU=riverlog`) and `client-cert.pem` / `client-key.pem` (the same, split, for
librdkafka-style settings). Never for production: the CA's key is thrown away.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class DevCerts:
    ca: Path
    broker: Path
    client: Path
    client_cert: Path
    client_key: Path


def write_dev_certs(directory: Path, client_cn: str = "client") -> DevCerts:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    broker = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(
        f"{client_cn}.riverlog", common_name=client_cn, organization_unit_name="riverlog"
    )
    paths = DevCerts(
        directory / "ca.pem",
        directory / "broker.pem",
        directory / "client.pem",
        directory / "client-cert.pem",
        directory / "client-key.pem",
    )
    ca.cert_pem.write_to_path(str(paths.ca))
    broker.private_key_and_cert_chain_pem.write_to_path(str(paths.broker))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths.client))
    client.cert_chain_pems[0].write_to_path(str(paths.client_cert))
    client.private_key_pem.write_to_path(str(paths.client_key))
    for path in (paths.broker, paths.client, paths.client_key):
        path.chmod(0o600)
    return paths
