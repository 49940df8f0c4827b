"""What the console answers when the cluster says no or the input is bad: the cluster's
error on the page (502), a form error (400), a cross-site form refused (403); the console
keeps serving afterwards. Against a real embedded broker, over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import pytest

from riverlog.embedded import broker
from tests.webconsole.console_harness import running_console


def _get(
    url: str, data: dict[str, str] | None = None, origin: str | None = None
) -> tuple[int, str]:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    request = urllib.request.Request(url, data=body, headers={"Origin": origin} if origin else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("path", ["/topics/no-such-topic", "/topics/no-such-topic/messages"])
def test_errors_show_on_the_page(path: str) -> None:
    with broker() as b, running_console(b.bootstrap_servers) as console:
        status, page = _get(console.url + path)
        assert status == 502
        assert 'class="error"' in page and "UNKNOWN_TOPIC_OR_PARTITION" in page

        status, page = _get(console.url + "/topics", {"name": "t", "partitions": "many"})
        assert status == 400 and "partitions: &#x27;many&#x27; is not a whole number" in page

        status, page = _get(console.url + "/topics", {"name": "t"}, origin="http://evil.example")
        assert status == 403

        status, page = _get(console.url + "/topics")
        assert status == 200 and 'id="topics"' in page  # still serving; nothing was created
        assert ">t<" not in page
