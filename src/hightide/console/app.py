"""The console's web app (Starlette + Jinja2; htmx and uPlot served from the package).

Pages render from the background :class:`~hightide.console.sampler.Sampler`'s latest
snapshot (groups, share groups) or ask the cluster directly (topics, cluster). Every
page's live part is re-fetched by htmx (``?fragment=1``, with the page's own query: the
groups list's sort and filters) and the lag charts poll ``/api/groups/{group}/history``
(``/api/share-groups/{group}/history``): nothing needs a reload.

Guarantees: read-only unless ``allow_writes``; every POST needs the CSRF token of the
page's form (double submit: a SameSite=Strict cookie and a form field that must match,
and an Origin header, when sent, naming this host); an unknown group or topic answers
404 with a sentence; an unreachable cluster answers a page with a banner (503 when there
is nothing to show), never a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..client import KafkaConnectionError, KafkaError, KafkaTimeoutError
from . import actions, cluster, views
from .sampler import UNREACHABLE, Sampler

__all__ = ["CSRF_COOKIE", "ConsoleConfig", "create_app"]

log = logging.getLogger("hightide.console")
HERE = Path(__file__).parent
CSRF_COOKIE = "hightide_console_csrf"
CSRF_FIELD = "csrf"


class ConsoleConfig:
    """What ``hightide console`` was started with."""

    def __init__(self, bootstrap: str, *, allow_writes: bool = False, refresh_s: float = 2.0,
                 idle_after_s: float = 300.0, page_timeout_s: float = 8.0) -> None:
        self.bootstrap = bootstrap
        self.allow_writes = allow_writes
        self.refresh_s = refresh_s
        self.idle_after_ms = int(idle_after_s * 1000)
        self.page_timeout_s = page_timeout_s


class NotFound(Exception):
    """An unknown group or topic; the message is shown on the 404 page."""


class Unreachable(Exception):
    """The cluster could not be reached for a page that has nothing cached to show."""


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["dash"] = lambda v: "-" if v is None else v
    env.filters["ms"] = views.fmt_ms
    env.filters["time"] = views.fmt_time
    env.filters["q"] = lambda v: quote(str(v), safe="")
    return env


def create_app(sampler: Sampler, config: ConsoleConfig) -> Starlette:
    """The ASGI app. Starts ``sampler`` on start-up and stops it on shutdown."""
    env = _env()
    plans = actions.PlanBook()

    # -- rendering -------------------------------------------------------------------------------
    def banner() -> dict[str, Any] | None:
        now = int(time.time() * 1000)
        current = sampler.current_error(now)
        if current is None:
            return None
        error, since = current
        return {"error": error, "bootstrap": config.bootstrap,
                "since": views.fmt_ms(now - since) if since else None,
                "last_ok": views.fmt_time(sampler.last_ok_ms), "retry_s": sampler.interval_s,
                "has_data": sampler.snapshot is not None}

    def render(request: Request, name: str, ctx: dict[str, Any], status: int = 200) -> HTMLResponse:
        token = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
        fragment = request.query_params.get("fragment") == "1"
        base = {"request": request, "config": config, "banner": banner(), "csrf": token,
                "fragment": fragment, "path": quote(request.scope["path"]), "sampler": sampler,
                "as_of": views.fmt_time(sampler.last_ok_ms), "now_ms": int(time.time() * 1000)}
        html = env.get_template(name).render({**base, **ctx})
        resp = HTMLResponse(html, status_code=status)
        if CSRF_COOKIE not in request.cookies:
            resp.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict")
        return resp

    async def check_post(request: Request) -> dict[str, str]:
        """The form of a POST after the CSRF and write checks; raises HTTPException 403."""
        form = {k: str(v) for k, v in (await request.form()).items()}
        cookie = request.cookies.get(CSRF_COOKIE)
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
            raise HTTPException(403, f"Cross-site request refused (Origin {origin} is not this console).")
        if not cookie or not secrets.compare_digest(cookie, form.get(CSRF_FIELD, "")):
            raise HTTPException(403, "Cross-site request refused: the form's CSRF token is missing or does not "
                                     "match (reload the page and try again).")
        if not config.allow_writes:
            raise HTTPException(403, "This console is read-only: start it with --allow-writes to reset offsets.")
        return form

    async def ask(coro: Any) -> Any:
        """``coro``'s result within the page timeout (TimeoutError: the banner page)."""
        async with asyncio.timeout(config.page_timeout_s):  # not wait_for: it can swallow a cancellation
            return await coro

    async def admin() -> Any:
        """The pages' admin client; Unreachable at once while the sampler's last round
        failed (it retries every interval: the pages recover with it)."""
        if sampler.error is not None:
            raise Unreachable(sampler.error)
        try:
            return await sampler.client()
        except UNREACHABLE as exc:
            sampler.failed(exc)
            raise Unreachable(str(exc)) from None

    # -- consumer groups -------------------------------------------------------------------------
    async def home(request: Request) -> Response:
        return RedirectResponse("/groups", status_code=307)

    async def groups_page(request: Request) -> Response:
        if sampler.snapshot is None:
            await sampler.sample()  # the first page before the first sample: take it now
        if sampler.snapshot is None:
            raise Unreachable(sampler.error or "no snapshot")
        snap, share = sampler.snapshot, sampler.share
        every = views.group_list(snap.groups if snap else {}, share.groups if share else None)
        q = request.query_params
        sort = q.get("sort", "name") if q.get("sort") in views.GROUP_SORTS else "name"
        order = q.get("order") if q.get("order") in ("asc", "desc") else None
        status = q.get("status", "all") if q.get("status") in views.STATUS_FILTERS else "all"
        name = q.get("q", "")[:200]
        rows = views.select_groups(every, sort=sort, desc=None if order is None else order == "desc",
                                   status=status, name=name)
        chosen = {k: v for k, v in (("sort", sort if sort != "name" else ""), ("order", order or ""),
                                    ("status", status if status != "all" else ""), ("q", name)) if v}
        return render(request, "groups.html", {
            "groups": rows, "total": len(every), "share_supported": share is not None,
            "sort": sort, "order": order, "status_filter": status, "name_filter": name,
            "sorts": views.GROUP_SORTS, "status_filters": views.STATUS_FILTERS,
            "query": urlencode(chosen) + "&" if chosen else "",
            "sort_links": {k: "?" + urlencode({**chosen, "sort": k, "order": _next_order(sort, order, k)})
                           for k in views.GROUP_SORTS}})

    async def group_report(group: str) -> Any:
        """The latest report of ``group``; samples again for a group created since; raises
        NotFound (with a pointer for a share group) when there is no such consumer group."""
        snap = sampler.snapshot
        if snap is None or group not in snap.groups:
            listed = {g.group_id: g.group_type for g in await (await admin()).list_groups()}
            kind = listed.get(group)
            if kind == "share":
                raise NotFound(f"Group '{group}' is a share group: see /share-groups/{quote(group, safe='')}.")
            if kind is None:
                raise NotFound(f"Consumer group '{group}' does not exist.")
            await sampler.sample()
            snap = sampler.snapshot
            if snap is None or group not in snap.groups:
                if sampler.error:
                    raise Unreachable(sampler.error)
                raise NotFound(f"Consumer group '{group}' does not exist.")
        return snap.groups[group]

    def group_ctx(report: Any) -> dict[str, Any]:
        from ..cli.groups import offset_rows
        view = views.group_view(report, offset_rows(report), now_ms=sampler.last_ok_ms or 0)
        topics = sorted({p["topic"] for p in view["partitions"]})
        return {"g": view, "s": view["summary"], "topics": topics}

    async def group_page(request: Request) -> Response:
        report = await group_report(request.path_params["group"])
        return render(request, "group.html", group_ctx(report))

    async def group_api(request: Request) -> Response:
        from ..cli.groups import offset_rows
        report = await group_report(request.path_params["group"])
        view = views.group_view(report, offset_rows(report), now_ms=sampler.last_ok_ms or 0)
        return JSONResponse({"summary": view["summary"], "rows": offset_rows(report), "time_ms": sampler.last_ok_ms})

    async def history_api(request: Request) -> Response:
        group = request.path_params["group"]
        if group not in sampler.history:
            await group_report(group)  # 404 for an unknown group
        return JSONResponse({"group": group, "interval_s": sampler.interval_s, "samples": sampler.samples,
                             "error": sampler.error, **sampler.series(group)})

    async def share_history_api(request: Request) -> Response:
        group = request.path_params["group"]
        if group not in sampler.share_history:
            await share_report(group)  # 404 for an unknown share group
        return JSONResponse({"group": group, "interval_s": sampler.interval_s, "samples": sampler.samples,
                             "error": sampler.error, **sampler.series(group, share=True)})

    async def status_api(request: Request) -> Response:
        snap = sampler.snapshot
        current = sampler.current_error()
        return JSONResponse({"bootstrap": config.bootstrap, "samples": sampler.samples,
                             "error": current[0] if current else None,
                             "last_ok_ms": sampler.last_ok_ms, "last_sample_s": sampler.last_duration_s,
                             "groups": len(snap.groups) if snap else None,
                             "group_partitions": sum(len(g.partitions) for g in snap.groups.values()) if snap else None,
                             "share_groups": len(sampler.share.groups) if sampler.share else None,
                             "read_only": not config.allow_writes})

    # -- resets ------------------------------------------------------------------------------------
    async def reset_preview(request: Request) -> Response:
        form = await check_post(request)
        report = await group_report(request.path_params["group"])
        ctx = group_ctx(report)
        try:
            spec, description = actions.spec_from_form(form, ctx["topics"])
            plan = await actions.plan_reset(await admin(), report.group, spec, description)
        except actions.ResetError as exc:
            return render(request, "reset.html", {**ctx, "error": str(exc), "plan": None}, status=400)
        plans.add(plan)
        return render(request, "reset.html", {**ctx, "plan": plan, "error": None})

    async def reset_confirm(request: Request) -> Response:
        form = await check_post(request)
        group = request.path_params["group"]
        try:
            plan = plans.take(form.get("plan", ""), group)
            await actions.execute(await admin(), plan)
        except actions.ResetError as exc:
            report = await group_report(group)
            return render(request, "reset.html", {**group_ctx(report), "error": str(exc), "plan": None}, status=409)
        await sampler.sample()
        report = await group_report(group)
        return render(request, "reset.html", {**group_ctx(report), "done": plan, "plan": None, "error": None})

    # -- share groups ------------------------------------------------------------------------------
    async def share_report(group: str) -> Any:
        """The latest report of share group ``group``; samples again for one created since;
        raises NotFound (with a pointer for a consumer group) when there is none."""
        share = sampler.share
        if share is None or group not in share.groups:
            kind = {g.group_id: g.group_type for g in await (await admin()).list_groups()}.get(group)
            if kind is not None and kind != "share":
                raise NotFound(f"Group '{group}' is a consumer group: see /groups/{quote(group, safe='')}.")
            if kind == "share":
                await sampler.sample()
                share = sampler.share
        if share is None or group not in share.groups:
            if sampler.error:
                raise Unreachable(sampler.error)
            if share is None:
                raise NotFound("This cluster does not serve share groups (no ListGroups v5 / "
                               "DescribeShareGroupOffsets).")
            raise NotFound(f"Share group '{group}' does not exist.")
        return share.groups[group]

    async def share_group_page(request: Request) -> Response:
        view = views.share_group_view(await share_report(request.path_params["group"]))
        return render(request, "share_group.html", {"g": view, "s": view["summary"]})

    # -- topics --------------------------------------------------------------------------------------
    async def topics_page(request: Request) -> Response:
        a = await admin()
        try:
            md = await ask(a.metadata())
            tps = [(t.name, p) for t in md.topics.values() for p in t.partitions]
            ends, maxts = await ask(_offsets(a, tps, ("latest", "max_timestamp")))
            sizes = await ask(_sizes(a, md.topics.values()))
        except UNREACHABLE as exc:
            sampler.failed(exc)
            raise Unreachable(str(exc)) from None
        show_internal = request.query_params.get("internal") == "1"
        rows = views.topic_list([t for t in md.topics.values() if show_internal or not t.is_internal],
                                ends, maxts, now_ms=int(time.time() * 1000), idle_after_ms=config.idle_after_ms,
                                sizes=sizes)
        return render(request, "topics.html", {"topics": rows, "show_internal": show_internal})

    async def topic_page(request: Request) -> Response:
        name = request.path_params["topic"]
        a = await admin()
        try:
            md = await ask(a.metadata([name]))
            t = md.topics.get(name)
            if t is None or t.error != 0:
                raise NotFound(f"Topic '{name}' does not exist.")
            tps = [(name, p) for p in t.partitions]
            ends, starts, maxts = await ask(_offsets(a, tps, ("latest", "earliest", "max_timestamp")))
            sizes = await ask(_sizes(a, [t]))
        except UNREACHABLE as exc:
            sampler.failed(exc)
            raise Unreachable(str(exc)) from None
        view = views.topic_view(t, {p: ends.get((name, p)) for p in t.partitions},
                                {p: starts.get((name, p)) for p in t.partitions},
                                {p: maxts.get((name, p)) for p in t.partitions},
                                now_ms=int(time.time() * 1000), idle_after_ms=config.idle_after_ms,
                                sizes={p: s for (_, p), s in sizes.items()})
        snap = sampler.snapshot
        readers = sorted(g for g, rep in (snap.groups if snap else {}).items()
                         if any(p.topic == name for p in rep.partitions))
        return render(request, "topic.html", {"t": view, "readers": readers})

    # -- cluster ---------------------------------------------------------------------------------------
    async def cluster_page(request: Request) -> Response:
        a = await admin()
        try:
            view = await ask(cluster.describe(a))
        except UNREACHABLE as exc:
            sampler.failed(exc)
            raise Unreachable(str(exc)) from None
        return render(request, "cluster.html", {"c": view})

    # -- errors ----------------------------------------------------------------------------------------
    async def not_found(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", {"title": "Not found", "message": str(exc)}, status=404)

    async def unreachable(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, Unreachable):
            sampler.failed(exc)
        return render(request, "error.html", {"title": "Cluster unreachable", "message": None}, status=503)

    async def kafka_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
            sampler.failed(exc)
            return await unreachable(request, exc)
        return render(request, "error.html", {"title": "The cluster refused",
                                              "message": f"The cluster answered {exc}."}, status=502)

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.error("console: %s %s failed", request.method, request.url.path, exc_info=exc)
        return render(request, "error.html", {"title": "Internal error",
                                              "message": f"The console failed: {type(exc).__name__}: {exc}. "
                                                         f"Details are in the console's log."}, status=500)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        msg = exc.detail if exc.status_code != 404 else f"There is no page at {request.url.path}."
        return render(request, "error.html", {"title": f"{exc.status_code}", "message": msg},
                      status=exc.status_code)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            await sampler.stop()

    routes = [
        # a group id may hold any character, "/" too: {group:path}, the longer routes first
        Route("/", home), Route("/groups", groups_page),
        Route("/groups/{group:path}/reset/confirm", reset_confirm, methods=["POST"]),
        Route("/groups/{group:path}/reset", reset_preview, methods=["POST"]),
        Route("/groups/{group:path}", group_page),
        Route("/api/status", status_api), Route("/api/groups/{group:path}/history", history_api),
        Route("/api/groups/{group:path}", group_api),
        Route("/api/share-groups/{group:path}/history", share_history_api),
        Route("/share-groups/{group:path}", share_group_page), Route("/topics", topics_page),
        Route("/topics/{topic}", topic_page), Route("/cluster", cluster_page),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers = {NotFound: not_found, Unreachable: unreachable, HTTPException: http_error,
                KafkaError: kafka_error, TimeoutError: unreachable, OSError: unreachable, Exception: internal_error}
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)


async def _sizes(admin: Any, topics: Any) -> dict[tuple[str, int], int]:
    """Each partition's log size in bytes (its leader's copy) from every broker's
    DescribeLogDirs; empty when the cluster does not say (no DESCRIBE on the cluster, a
    broker without the API, a broker not answering)."""
    from ..client import KafkaError
    from ..client.log_dirs import partition_sizes
    topics = list(topics)
    try:
        dirs = await admin.describe_log_dirs(topics={t.name: sorted(t.partitions) for t in topics})
    except KafkaError:
        return {}
    return partition_sizes(dirs, {(t.name, p): pm.leader for t in topics for p, pm in t.partitions.items()})


def _next_order(sort: str, order: str | None, key: str) -> str:
    """The order a column header's link asks for: the other way round when the list is
    already sorted by that column, else the column's natural order."""
    natural = "asc" if key in ("name", "type") else "desc"
    if key != sort:
        return natural
    current = order or natural
    return "asc" if current == "desc" else "desc"


async def _offsets(admin: Any, tps: list[tuple[str, int]], specs: tuple[str, ...]) -> tuple[dict[Any, Any], ...]:
    """ListOffsets answers for ``tps``, one dict (keyed by (topic, partition)) per spec;
    a partition's failure is its KafkaError, not an exception."""
    from ..client import TopicPartition
    keys = [TopicPartition(t, p) for t, p in tps]
    out = []
    for spec in specs:
        got = await admin.list_offsets({tp: spec for tp in keys}, raise_on_error=False) if keys else {}
        out.append({(tp.topic, tp.partition): r for tp, r in got.items()})
    return tuple(out)
