"""What a signed-in person may start from the pages: a crawl, a verification.

Signing in takes the API's bearer token once and keeps it in an HttpOnly, SameSite=Strict
cookie (Secure on https), checked as the API checks a bearer token. Every form that changes
state carries a CSRF token, an HMAC of the signed-in token that only a page of this site can
show (a cross-site page can neither read the cookie nor the pages), and a form posted with
an Origin of another site is refused before it is read.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from registry.api.bodies import crawl_spec
from registry.api.errors import Forbidden, InvalidParameter
from registry.api.keys import AUTH_KEY
from registry.api.params import path_int
from registry.api.routes.crawls import crawl_launcher, launch_crawl
from registry.api.routes.verifications import queue_verification
from registry.web.render import render
from registry.web.session import COOKIE, csrf_token, signed_in

routes = web.RouteTableDef()
# What a form may bring: a token, a few words and a repo list, never a file.
MAX_FORM_BYTES = 64 * 1024


async def _form(request: web.Request) -> dict[str, str]:
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        raise Forbidden("a form of another site cannot change this catalog")
    if (request.content_length or 0) > MAX_FORM_BYTES:
        raise InvalidParameter("form", f"the form is over {MAX_FORM_BYTES} bytes")
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}  # a file field is no value here


async def _signed_form(request: web.Request) -> dict[str, str]:
    form = await _form(request)
    token = signed_in(request)
    if token is None:
        raise Forbidden("sign in with an API token first")
    if not hmac.compare_digest(form.get("csrf", ""), csrf_token(token)):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and send it again")
    return form


@routes.get("/signin", name="web_signin")
async def signin_page(request: web.Request) -> web.Response:
    return render(request, "signin.html", title="Sign in", json_url="/v1/crawls")


@routes.post("/signin", name="web_signin_post")
async def signin(request: web.Request) -> web.Response:
    token = (await _form(request)).get("token", "").strip()
    if not request.app[AUTH_KEY].writes_enabled:
        raise Forbidden("this server has no API tokens configured (api.tokens): nothing can be started from here")
    if not token or not request.app[AUTH_KEY].is_valid(token):
        raise Forbidden("that is not a valid API token")
    response = web.HTTPSeeOther("/crawls")
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=request.secure, path="/")
    raise response


@routes.post("/signout", name="web_signout")
async def signout(request: web.Request) -> web.Response:
    await _signed_form(request)
    response = web.HTTPSeeOther("/")
    response.del_cookie(COOKIE, path="/")
    raise response


@routes.post("/crawls/start", name="web_crawl_start")
async def start_crawl(request: web.Request) -> web.Response:
    form = await _signed_form(request)
    launcher = crawl_launcher(request)
    body: dict[str, object] = {"source": form.get("source", "")}
    for name in ("author", "search"):
        if value := form.get(name, "").strip():
            body[name] = value
    if repos := form.get("repos", "").split():
        body["repos"] = repos
    if limit := form.get("limit", "").strip():
        if not limit.isdigit():
            raise InvalidParameter("limit", "limit must be a whole number")
        body["limit"] = int(limit)
    spec = crawl_spec(body, launcher.sources())
    crawl = await launch_crawl(request, launcher, spec, spec.to_parameters())
    raise web.HTTPSeeOther(f"/crawls/{crawl.id}")


@routes.post("/artifacts/{id}/verify", name="web_verify")
async def verify(request: web.Request) -> web.Response:
    await _signed_form(request)
    artifact_id = path_int(request, "id")
    queued = await queue_verification(request, artifact_id)
    raise web.HTTPSeeOther(f"/verifications/{queued.id}")
