"""The web console on a secured broker: it connects over SASL_SSL with the credentials it is
given and shows what they allow (ACL authorizer: a topic the principal may not describe is
not listed; an action it may not take shows the cluster's refusal on the page)."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.security.conftest import SecuredBroker, start_secured
from tests.webconsole.console_harness import running_console

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    running = start_secured(
        tmp_path_factory.mktemp("console"),
        **{
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",  # ANONYMOUS: the PLAINTEXT listener
        },
    )
    try:
        yield running
    finally:
        running.embedded.stop()


def _get(url: str, data: dict[str, str] | None = None) -> tuple[int, str]:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_console_shows_what_its_credentials_allow(secured: SecuredBroker) -> None:
    suffix = uuid.uuid4().hex[:8]
    visible, hidden = f"seen-{suffix}", f"unseen-{suffix}"
    admin = AdminClient({"bootstrap.servers": secured.address("PLAINTEXT")})
    for future in admin.create_topics([NewTopic(visible, 1), NewTopic(hidden, 1)]).values():
        future.result(30)
    grant = AclBinding(
        ResourceType.TOPIC,
        visible,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([grant]).values():
        future.result(30)
    alice = {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(secured.certs.ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    with running_console(secured.address("SASL_SSL"), config=alice) as console:
        status, page = _get(console.url + "/topics")
        assert status == 200, page
        assert f">{visible}<" in page and hidden not in page
        # creating a topic needs Create on the cluster: the refusal is shown, nothing made
        status, page = _get(console.url + "/topics", {"name": f"new-{suffix}", "partitions": "1"})
        assert status == 502 and "TOPIC_AUTHORIZATION_FAILED" in page
    assert f"new-{suffix}" not in admin.list_topics(timeout=10).topics


def test_wrong_credentials_show_the_authentication_error(secured: SecuredBroker) -> None:
    wrong = {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.location": str(secured.certs.ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "not-her-password",
    }
    with running_console(secured.address("SASL_SSL"), config=wrong) as console:
        status, page = _get(console.url + "/topics")
        assert status == 502 and "invalid credentials with SASL mechanism PLAIN" in page
