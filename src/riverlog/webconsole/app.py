"""The web console's aiohttp application: routes, form handling, errors.

    app = build_app(ConsoleClient(config), History(keep_ms), sample_interval_s)

GET pages render the cluster as it is now (`queries`) plus what the sampler remembers
(`history`); POST forms change it (create topic, add partitions, edit configs, delete topic,
reset offsets) and redirect back with a flash message. A Kafka error (including an
authorisation failure for what the console's credentials may not do) or an unreachable
cluster shows as an error box on the page, never as a crash; bad form input answers 400.

Invariant: a POST whose Origin header names another site is refused (403), so another page
in the operator's browser cannot drive the console.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

from aiohttp import web

from riverlog.cli.group_tables import Scenario, parse_datetime, parse_duration, plan_reset
from riverlog.protocol.error_codes import KafkaError
from riverlog.webconsole import pages_cluster, pages_groups, pages_messages
from riverlog.webconsole.history import History
from riverlog.webconsole.html import Html, page, tag
from riverlog.webconsole.queries import EARLIEST, LATEST, ConsoleClient
from riverlog.webconsole.sampler import Sampler

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
CLIENT: web.AppKey[ConsoleClient] = web.AppKey("client", ConsoleClient)
HISTORY: web.AppKey[History] = web.AppKey("history", History)
SAMPLER: web.AppKey[Sampler] = web.AppKey("sampler", Sampler)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadInput(ValueError):
    """A form or query value the console cannot use (answered 400)."""


def _render(
    request: web.Request,
    title: str,
    body: Html,
    *,
    active: str,
    error: str = "",
    status: int = 200,
    scripts: bool = False,
) -> web.Response:
    client = request.app[CLIENT]
    text = page(
        title,
        body,
        active=active,
        cluster=client.admin.config.bootstrap_servers,
        flash=request.query.get("flash", ""),
        error=error,
        scripts=scripts,
    )
    return web.Response(text=text, content_type="text/html", status=status)


def _redirect(location: str, flash: str) -> web.HTTPSeeOther:
    sep = "&" if "?" in location else "?"
    return web.HTTPSeeOther(location + sep + urlencode({"flash": flash}))


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method == "POST":
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise web.HTTPForbidden(text="cross-site form refused")
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BadInput as e:
        return _render(
            request,
            "Bad input",
            tag("p", "Go back and correct the form."),
            active="",
            error=str(e),
            status=400,
        )
    except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
        log.info("console: %s %s: %s", request.method, request.path, e)
        what = e.error.name if isinstance(e, KafkaError) else type(e).__name__
        return _render(
            request,
            "Cluster error",
            tag("p", "The cluster answered with an error."),
            active="",
            error=f"{what}: {e}",
            status=502,
        )


def _int(value: str, what: str, minimum: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise BadInput(f"{what}: {value!r} is not a whole number") from None
    if minimum is not None and n < minimum:
        raise BadInput(f"{what}: must be at least {minimum}")
    return n


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise BadInput(f"config line {line!r} is not key=value")
            out[key.strip()] = value.strip()
    return out


# -- brokers, topics, reassignments, throughput ------------------------------------------


async def brokers(request: web.Request) -> web.Response:
    view, rows = await request.app[CLIENT].brokers()
    return _render(request, "Brokers", pages_cluster.brokers(view, rows), active="/")


async def topics(request: web.Request) -> web.Response:
    rows = await request.app[CLIENT].topics()
    internal = request.query.get("internal") == "1"
    return _render(request, "Topics", pages_cluster.topic_list(rows, internal), active="/topics")


async def create_topic(request: web.Request) -> web.Response:
    form = await request.post()
    name = str(form.get("name", "")).strip()
    if not name:
        raise BadInput("a topic needs a name")
    await request.app[CLIENT].admin.create_topic(
        name,
        _int(str(form.get("partitions", "1")), "partitions", -1),
        _int(str(form.get("replication_factor", "-1")), "replication factor", -1),
        _pairs(str(form.get("configs", ""))),
    )
    raise _redirect(pages_cluster.topic_href(name), f"Created topic {name}.")


async def topic(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    row, parts, configs = await request.app[CLIENT].topic(name)
    return _render(
        request, f"Topic {name}", pages_cluster.topic(row, parts, configs), active="/topics"
    )


async def add_partitions(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    count = _int(str((await request.post()).get("count", "")), "partition count", 1)
    await request.app[CLIENT].admin.create_partitions(name, count)
    raise _redirect(pages_cluster.topic_href(name), f"{name} now has {count} partitions.")


async def edit_configs(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    form = await request.post()
    changes = _pairs(str(form.get("set", "")))
    delete = [k.strip() for k in str(form.get("delete", "")).split(",") if k.strip()]
    if not changes and not delete:
        raise BadInput("nothing to set or delete")
    await request.app[CLIENT].admin.alter_configs(2, name, set=changes, delete=delete)
    raise _redirect(pages_cluster.topic_href(name), f"Configs of {name} updated.")


async def delete_topic(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if str((await request.post()).get("confirm", "")) != name:
        raise BadInput(f"type the topic's name ({name}) to confirm its deletion")
    await request.app[CLIENT].admin.delete_topic(name)
    raise _redirect("/topics", f"Deleted topic {name}.")


async def reassignments(request: web.Request) -> web.Response:
    moves = await request.app[CLIENT].admin.list_partition_reassignments()
    return _render(
        request,
        "Reassignments in progress",
        pages_cluster.reassignments(moves),
        active="/reassignments",
    )


async def throughput(request: web.Request) -> web.Response:
    history = request.app[HISTORY]
    chosen = request.query.get("topic") or next(
        (t for t in history.topics() if not t.startswith("__")), None
    )
    return _render(
        request,
        "Throughput",
        pages_cluster.throughput(history, chosen),
        active="/throughput",
        scripts=True,
    )


# -- messages ------------------------------------------------------------------------------


async def messages(request: web.Request) -> web.Response:
    client = request.app[CLIENT]
    name = request.match_info["name"]
    q = request.query
    (info,) = await client.admin.describe_topics([name])
    partition = _int(q.get("partition", "0"), "partition", 0)
    if partition >= len(info.partitions):
        raise BadInput(f"{name} has no partition {partition}")
    limit = min(_int(q.get("limit", "50"), "records", 1), 1000)
    tp = (name, partition)
    first = (await client.offsets([tp], EARLIEST))[tp]
    end = (await client.offsets([tp], LATEST))[tp]
    start_kind, at = q.get("start", "tail"), q.get("at", "").strip()
    key = q.get("key", "")
    if start_kind == "beginning":
        start = first
    elif start_kind == "offset":
        start = max(_int(at, "offset", 0), first)
    elif start_kind == "timestamp":
        try:
            ms = int(at) if at.isdigit() else parse_datetime(at)
        except ValueError as e:
            raise BadInput(f"timestamp: {e}") from None
        found = (await client.offsets([tp], ms))[tp]
        start = end if found < 0 else found
    else:
        start = max(end - limit, first) if not key else first
    records, scanned_to = await client.read(tp, start, end, limit, key.encode() or None)
    how = q.get("format", "auto")
    body = Html(
        pages_messages.browser_form(request.path, len(info.partitions), q)
        + pages_messages.records(records, how, scanned_to, end)
    )
    return _render(request, f"Messages of {name}", body, active="/topics")


# -- consumer groups -------------------------------------------------------------------------


async def groups(request: web.Request) -> web.Response:
    listing = await request.app[CLIENT].admin.list_groups()
    body = pages_groups.group_list(listing, request.app[HISTORY])
    return _render(request, "Consumer groups", body, active="/groups")


async def group(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    view = await request.app[CLIENT].group(name)
    form = pages_groups.reset_form(name, sorted({r.topic for r in view.rows}), {})
    body = pages_groups.group(view, request.app[HISTORY], form)
    return _render(request, f"Group {name}", body, active="/groups", scripts=True)


def _scenario(kind: str, value: str) -> Scenario:
    try:
        if kind in ("earliest", "latest", "current"):
            return Scenario(kind)
        if kind == "offset":
            return Scenario("offset", _int(value, "offset", 0))
        if kind == "shift":
            return Scenario("shift", _int(value, "shift"))
        if kind == "datetime":
            return Scenario("timestamp", parse_datetime(value.strip()))
        if kind == "duration":
            return Scenario("timestamp", int(time.time() * 1000) - parse_duration(value.strip()))
    except ValueError as e:
        raise BadInput(str(e)) from None
    raise BadInput(f"unknown reset scenario {kind!r}")


async def reset_offsets(request: web.Request) -> web.Response:
    client = request.app[CLIENT]
    name = request.match_info["group"]
    form = {k: str(v) for k, v in (await request.post()).items()}
    scenario = _scenario(form.get("scenario", ""), form.get("value", ""))
    execute = form.get("action") == "execute"
    view = await client.group(name)
    topics = sorted({r.topic for r in view.rows})
    wanted = form.get("topic") or None
    partitions = [(r.topic, r.partition) for r in view.rows if wanted in (None, r.topic)]
    if not partitions:
        raise BadInput("the group has no partitions to reset" + (f" on {wanted}" if wanted else ""))
    committed = {(r.topic, r.partition): r.committed for r in view.rows if r.committed is not None}
    earliest = await client.offsets(partitions, EARLIEST)
    latest = await client.offsets(partitions, LATEST)
    by_time = (
        await client.offsets(partitions, scenario.value) if scenario.kind == "timestamp" else None
    )
    try:
        plan = plan_reset(scenario, partitions, committed, earliest, latest, by_time)
    except ValueError as e:
        raise BadInput(str(e)) from None
    state = view.description.state
    if execute:
        if state not in pages_groups.INACTIVE:
            raise BadInput(
                f"Assignments can only be reset if the group '{name}' is inactive, "
                f"but the current state is {state}."
            )
        await client.admin.reset_group_offsets(name, plan)
        raise _redirect(pages_groups.group_href(name), f"Offsets of {len(plan)} partitions reset.")
    preview = pages_groups.reset_preview(plan, committed, False, state)
    body = pages_groups.reset_page(pages_groups.reset_form(name, topics, form), preview)
    return _render(request, f"Reset offsets of {name}", body, active="/groups")


# -- the application -------------------------------------------------------------------------


def build_app(client: ConsoleClient, history: History, sample_interval_s: float) -> web.Application:
    app = web.Application(middlewares=[errors])
    app[CLIENT] = client
    app[HISTORY] = history
    app[SAMPLER] = Sampler(client, history, sample_interval_s)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        app[SAMPLER].start()
        yield
        await app[SAMPLER].stop()
        await client.close()

    app.cleanup_ctx.append(lifecycle)
    app.add_routes(
        [
            web.get("/", brokers),
            web.get("/topics", topics),
            web.post("/topics", create_topic),
            web.get("/topics/{name}", topic),
            web.get("/topics/{name}/messages", messages),
            web.post("/topics/{name}/partitions", add_partitions),
            web.post("/topics/{name}/configs", edit_configs),
            web.post("/topics/{name}/delete", delete_topic),
            web.get("/groups", groups),
            web.get("/groups/{group}", group),
            web.post("/groups/{group}/reset", reset_offsets),
            web.get("/throughput", throughput),
            web.get("/reassignments", reassignments),
            web.static("/static", STATIC),
        ]
    )
    return app
