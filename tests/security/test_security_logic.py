"""Unit tests of security's pure parts: the ACL decision, JAAS lines, principal mapping
rules, listener settings, the SASL state machine and start-up refusals (fail closed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from scramp import ScramClient

from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.security import acl, authorization, jaas, tls
from riverlog.security.authorizer import Authorizer, configured
from riverlog.security.broker_security import BrokerSecurity
from riverlog.security.errors import SecurityConfigError
from riverlog.security.listeners import Listeners
from riverlog.security.rules import NoTopics
from riverlog.security.sasl import SaslFailure, SaslServer
from riverlog.security.scram_credentials import ScramCredential, make
from riverlog.server.config import ConfigError

ALICE = "User:alice"


def _acls(*bindings: tuple[acl.Pattern, acl.Entry]) -> dict[acl.Pattern, list[acl.Entry]]:
    out: dict[acl.Pattern, list[acl.Entry]] = {}
    for pattern, entry in bindings:
        out.setdefault(pattern, []).append(entry)
    return out


def _allow(principal: str = ALICE, operation: str = "Read", host: str = "*") -> acl.Entry:
    return acl.Entry(principal, host, operation, acl.ALLOW)


def test_acl_decisions_follow_kafkas_rules() -> None:
    topic = ("Topic", "payments")
    prefixed = acl.Pattern("Topic", "pay", acl.PREFIXED)
    acls = _acls((prefixed, _allow()), (acl.Pattern("Topic", "*"), _allow("User:bob", "Write")))
    assert acl.authorize(ALICE, "10.0.0.1", "Read", topic, acls)
    assert acl.authorize(ALICE, "10.0.0.1", "Describe", topic, acls)  # implied by Read
    assert not acl.authorize(ALICE, "10.0.0.1", "Write", topic, acls)
    assert acl.authorize("User:bob", "h", "Write", ("Topic", "anything"), acls)  # wildcard
    assert not acl.authorize(ALICE, "h", "Read", ("Topic", "orders"), acls)
    # a deny wins over any allow; hosts are exact or *
    acls[acl.Pattern("Topic", "payments")] = [acl.Entry(ALICE, "10.0.0.9", "Read", acl.DENY)]
    assert not acl.authorize(ALICE, "10.0.0.9", "Read", topic, acls)
    assert acl.authorize(ALICE, "10.0.0.1", "Read", topic, acls)
    # User:* matches every principal; All every operation; no ACL at all: the flag decides
    everyone = _acls((acl.Pattern("Group", "g"), _allow("User:*", "All")))
    assert acl.authorize("User:x", "h", "Delete", ("Group", "g"), everyone)
    assert not acl.authorize("User:x", "h", "Read", ("Group", "other"), everyone)
    assert acl.authorize("User:x", "h", "Read", ("Group", "other"), everyone, allow_if_no_acl=True)
    assert acl.authorize(
        "User:root", "h", "Alter", ("Cluster", "kafka-cluster"), {}, super_users={"User:root"}
    )


def test_by_resource_type_follows_kip_679() -> None:
    """Kafka's authorizeByResourceType: some topic allows Write, and no DENY covers it."""

    def may_write_some_topic(acls: dict[acl.Pattern, list[acl.Entry]], **kw: bool) -> bool:
        return acl.authorize_by_resource_type(ALICE, "10.0.0.1", "Write", "Topic", acls, **kw)

    def deny(name: str, pattern_type: str = acl.LITERAL) -> tuple[acl.Pattern, acl.Entry]:
        return acl.Pattern("Topic", name, pattern_type), acl.Entry(ALICE, "*", "Write", acl.DENY)

    literal = (acl.Pattern("Topic", "orders"), _allow(operation="Write"))
    prefixed = (acl.Pattern("Topic", "pay", acl.PREFIXED), _allow(operation="All"))
    assert not may_write_some_topic({})
    assert may_write_some_topic({}, allow_if_no_acl=True)
    assert not may_write_some_topic(_acls((acl.Pattern("Topic", "orders"), _allow())))  # Read
    assert may_write_some_topic(_acls(literal))
    assert not may_write_some_topic(_acls(literal, deny("orders")))
    assert not may_write_some_topic(_acls(literal, deny("ord", acl.PREFIXED)))
    assert may_write_some_topic(_acls(literal, deny("other")))
    assert may_write_some_topic(_acls(prefixed, deny("payments")))  # "pay-x" stays writable
    assert not may_write_some_topic(_acls(prefixed, deny("pa", acl.PREFIXED)))
    assert not may_write_some_topic(_acls(literal, prefixed, deny("*")), allow_if_no_acl=True)
    elsewhere = (acl.Pattern("Topic", "orders"), _allow(operation="Write", host="10.9.9.9"))
    assert not may_write_some_topic(_acls(elsewhere))
    assert acl.authorize_by_resource_type(
        "User:root", "h", "Write", "Topic", {}, super_users={"User:root"}
    )


def test_acl_filters_match_like_describe_acls() -> None:
    acls = _acls(
        (acl.Pattern("Topic", "pay", acl.PREFIXED), _allow()),
        (acl.Pattern("Topic", "payments"), _allow("User:bob")),
    )
    match = acl.select(acls, acl.Filter("Topic", "payments", "MATCH"))
    assert {p.pattern_type for p, _ in match} == {acl.LITERAL, acl.PREFIXED}
    literal = acl.select(acls, acl.Filter("Topic", "payments", acl.LITERAL))
    assert [(p.name, e.principal) for p, e in literal] == [("payments", "User:bob")]
    assert len(acl.select(acls, acl.Filter(principal=ALICE))) == 1


def test_jaas_lines_parse_as_kafka_parses_them() -> None:
    text = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="a\\"b;c" user_admin="x" user_alice=bare;'
        " org.apache.kafka.common.security.scram.ScramLoginModule optional;"
    )
    modules = jaas.parse(text)
    assert [m.class_name.rsplit(".", 1)[1] for m in modules] == [
        "PlainLoginModule",
        "ScramLoginModule",
    ]
    assert modules[0].options["password"] == 'a"b;c'
    assert modules[0].users() == {"admin": "x", "alice": "bare"}
    for bad in ("", "Module", "Module sometimes;", 'Module required a="b"', "M required a;"):
        with pytest.raises(SecurityConfigError):
            jaas.parse(bad)


def test_principal_mapping_rules() -> None:
    rules = tls.parse_mapping_rules(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U, RULE:^CN=([^,]+),.*$/$1/L,DEFAULT"
    )
    assert tls.principal_name("CN=svc,OU=ServiceUsers,O=X", rules) == "SVC"
    assert tls.principal_name("CN=Alice,O=Y", rules) == "alice"
    assert tls.principal_name("O=NoCn", rules) == "O=NoCn"
    assert (
        tls.subject_dn({"subject": ((("organizationName", "Org, Inc"),), (("commonName", "bob"),))})
        == "CN=bob,O=Org\\, Inc"
    )
    with pytest.raises(SecurityConfigError):
        tls.parse_mapping_rules("RULE:broken")


def test_listener_settings_are_validated() -> None:
    found = Listeners.from_properties(
        {
            "listeners": "INTERNAL://:9093,EXTERNAL://0.0.0.0:9094",
            "advertised.listeners": "EXTERNAL://kafka.example.com:9094",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SSL",
            "inter.broker.listener.name": "internal",
        }
    )
    assert found.inter_broker == "INTERNAL"
    assert [(s.name, s.host, s.protocol) for s in found.advertised] == [
        ("INTERNAL", "", "SASL_SSL"),
        ("EXTERNAL", "kafka.example.com", "SSL"),
    ]
    refused = [
        {"listeners": "CLIENT://:9092"},  # not in the default map
        {"listeners": "PLAINTEXT://:9092,SSL://:9092"},  # one port twice
        {"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:1"},
        {
            "listeners": "PLAINTEXT://:9092,SSL://:9093",
            "inter.broker.listener.name": "SSL",
            "security.inter.broker.protocol": "SSL",
        },
        {"listeners": "SSL://:9093,SASL_SSL://:9094"},  # no PLAINTEXT for inter-broker
    ]
    for props in refused:
        with pytest.raises(ConfigError):
            Listeners.from_properties(props)


def test_settings_riverlog_cannot_honour_stop_start_up(tmp_path: object) -> None:
    for props in (
        {"listeners": "SASL_PLAINTEXT://:0"},  # Kafka's default mechanism: GSSAPI
        {"listeners": "SSL://:0", "ssl.keystore.type": "JKS", "ssl.keystore.location": "x"},
        {"listeners": "SSL://:0"},  # no key store
        {"listeners": "SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms": "PLAIN"},  # no users
    ):
        with pytest.raises(ConfigError):
            BrokerSecurity(props)
    with pytest.raises(ConfigError):
        configured({"authorizer.class.name": "com.example.CustomAuthorizer"})
    assert configured({"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"})


def _server(reauth_ms: int = 0) -> SaslServer:
    credential = make("SCRAM-SHA-256", "s3cret", 4096)

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return credential if (user, mechanism) == ("carol", "SCRAM-SHA-256") else None

    return SaslServer(
        ["PLAIN", "SCRAM-SHA-256"],
        plain_users={"alice": "pw"},
        scram_lookup=lookup,
        reauth_ms=reauth_ms,
    )


def test_sasl_plain_and_scram_exchanges() -> None:
    plain = _server(reauth_ms=1000)
    assert plain.handshake("PLAIN", raw_tokens=False) is error_codes.NONE
    assert plain.authenticate(b"\0alice\0pw", now_ms=5000) == b""
    assert plain.principal == "User:alice" and plain.expires_ms == 6000
    assert plain.expired(6000) and not plain.expired(5999)
    # re-authentication must keep the principal
    assert plain.handshake("PLAIN", raw_tokens=False) is error_codes.NONE
    with pytest.raises(SaslFailure):
        plain.authenticate(b"\0mallory\0x", now_ms=6000)

    scram = _server()
    assert scram.handshake("SCRAM-SHA-256", raw_tokens=True) is error_codes.NONE
    client = ScramClient(["SCRAM-SHA-256"], "carol", "s3cret")
    first = scram.authenticate(client.get_client_first().encode(), 0)
    client.set_server_first(first.decode())
    final = scram.authenticate(client.get_client_final().encode(), 0)
    client.set_server_final(final.decode())  # the server proved it knows the key
    assert scram.authenticated and scram.principal == "User:carol"


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"garbage", b"\0\0", b"\xff\0alice\0pw"])
def test_bad_plain_tokens_fail_with_kafkas_error(token: bytes) -> None:
    server = _server()
    server.handshake("PLAIN", raw_tokens=False)
    with pytest.raises(SaslFailure) as failure:
        server.authenticate(token, 0)
    assert failure.value.error is error_codes.SASL_AUTHENTICATION_FAILED
    assert server.state == "failed"


def test_sasl_state_errors() -> None:
    server = _server()
    assert server.handshake("GSSAPI", raw_tokens=False) is error_codes.UNSUPPORTED_SASL_MECHANISM
    fresh = _server()
    with pytest.raises(SaslFailure) as failure:
        fresh.authenticate(b"\0alice\0pw", 0)  # before a handshake
    assert failure.value.error is error_codes.ILLEGAL_SASL_STATE
    scram = _server()
    scram.handshake("SCRAM-SHA-256", raw_tokens=False)
    with pytest.raises(SaslFailure):
        scram.authenticate(b"n,,n=nobody,r=abc", 0)


def test_a_connections_subject_follows_its_principal() -> None:
    """The wrapper keeps a connection's Subject between requests; a new principal (a SASL
    login) gets a new one, so no decision carries over from the old principal."""
    authorizer = Authorizer({}, EmbeddedStore(None))
    authorizer.cache.add(acl.Pattern(acl.TOPIC, "pay", acl.PREFIXED), [_allow(ALICE, "Write")])
    answered = m.ProduceResponse(responses=[])
    guarded = authorization.wrap(
        m.ProduceRequest.API_KEY, lambda ctx: answered, authorizer, NoTopics()
    )
    conn = SimpleNamespace(principal=ALICE, client_host="10.0.0.1", subject=None)

    def produce(*topics: str) -> list[int]:
        """Error codes of the partitions the authorizer answered (denied ones)."""
        partition = m.ProduceRequest.PartitionProduceData(index=0, records=b"")
        data = [
            m.ProduceRequest.TopicProduceData(name=t, partition_data=[partition]) for t in topics
        ]
        request = m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=data)
        ctx = SimpleNamespace(connection=conn, request=SimpleNamespace(body=request), version=9)
        answered.responses = []
        result = guarded(ctx)  # type: ignore[arg-type]
        assert isinstance(result, m.ProduceResponse)
        return [p.error_code for t in result.responses for p in t.partition_responses]

    denied = error_codes.TOPIC_AUTHORIZATION_FAILED.code
    assert produce("payments", "payroll") == []
    kept = conn.subject
    assert kept is not None and kept.principal == ALICE
    assert produce("payments", "orders") == [denied]
    assert conn.subject is kept  # the same principal: the same Subject
    conn.principal = "User:mallory"
    assert produce("payments") == [denied]
    assert conn.subject is not kept and conn.subject.principal == "User:mallory"
