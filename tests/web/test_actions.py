"""Starting a crawl and a verification from the pages: the API token sent once and kept in an
HttpOnly, SameSite=Strict cookie; every state-changing form needs its CSRF token and is refused
from another site's origin; what starts is what the API's routes start."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import select

from registry.api.launchers import RecordingLauncher
from registry.catalog.models import Crawl, Verification
from tests.api.conftest import (  # noqa: F401
    WRITE_TOKEN,
    ApiClient,
    MakeApi,
    RowVerifier,
    catalog,
    insert,
    make_api,
    settings_with,
)
from tests.web.conftest import db, db_url, postgresql_url, sqlite_url, temp_databases  # noqa: F401

pytestmark = pytest.mark.usefixtures("catalog")


async def _signed_in(api: ApiClient) -> str:
    """Sign in; the page's CSRF token."""
    async with api.client.post("/signin", data={"token": WRITE_TOKEN}, allow_redirects=False) as resp:
        assert resp.status == 303 and resp.headers["Location"] == "/crawls"
        cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    page = await api.get("/crawls")
    (csrf,) = set(re.findall(r'name="csrf" value="([0-9a-f]{64})"', page.body))
    return csrf


async def _post(api: ApiClient, path: str, data: dict[str, str], **headers: str) -> Any:
    async with api.client.post(path, data=data, headers=headers, allow_redirects=False) as resp:
        return resp.status, resp.headers.get("Location"), await resp.text()


async def test_a_crawl_starts_from_the_page_with_token_cookie_and_csrf(make_api: MakeApi, db: Any) -> None:  # noqa: F811
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    assert "Start the crawl" not in (await api.get("/crawls")).body  # not signed in: no form
    assert (await _post(api, "/crawls/start", {"source": "hub", "author": "someone"}))[0] == 403
    csrf = await _signed_in(api)
    status, _, body = await _post(api, "/crawls/start", {"source": "hub", "author": "someone"})
    assert status == 403 and "CSRF" in body  # signed in, but no CSRF token
    status, _, _ = await _post(api, "/crawls/start", {"source": "hub", "csrf": csrf},
                               Origin="https://evil.example")  # fmt: skip
    assert status == 403
    status, location, _ = await _post(api, "/crawls/start", {"source": "hub", "author": "someone", "limit": "5",
                                                             "csrf": csrf})  # fmt: skip
    assert status == 303 and location is not None and location.startswith("/crawls/")
    async with db.sessions() as session:
        (row,) = (await session.scalars(select(Crawl))).all()
    assert location == f"/crawls/{row.id}" and row.parameters["author"] == "someone"
    assert [crawl_id for crawl_id, _ in launcher.launched] == [row.id]
    bad = await _post(api, "/crawls/start", {"source": "nowhere", "csrf": csrf})
    assert bad[0] == 400 and "source" in bad[2]


async def test_a_wrong_token_is_refused_and_signing_out_clears_the_cookie(make_api: MakeApi) -> None:  # noqa: F811
    api = await make_api(launcher=RecordingLauncher())
    status, _, body = await _post(api, "/signin", {"token": "not-it"})
    assert status == 403 and "not a valid API token" in body
    csrf = await _signed_in(api)
    assert (await _post(api, "/signout", {}))[0] == 403  # without its CSRF token
    async with api.client.post("/signout", data={"csrf": csrf}, allow_redirects=False) as resp:
        assert resp.status == 303
        assert 'registry_token=""' in resp.headers["Set-Cookie"]
    api.client.session.cookie_jar.clear()
    assert "Sign in" in (await api.get("/crawls")).body


async def test_a_verification_starts_from_the_artifact_page(make_api: MakeApi, db: Any) -> None:  # noqa: F811
    api = await make_api(verifier=RowVerifier(db))
    csrf = await _signed_in(api)
    page = await api.get("/artifacts/1")
    assert "Verify this file" in page.body
    status, location, _ = await _post(api, "/artifacts/1/verify", {"csrf": csrf})
    async with db.sessions() as session:
        (row,) = (await session.scalars(select(Verification))).all()
    assert status == 303 and location == f"/verifications/{row.id}"
    assert row.artifact_id == 1 and row.status == "queued"
    async with db.sessions() as session, session.begin():
        stored = await session.get(Verification, row.id)
        assert stored is not None
        stored.generated = "<script>alert(1)</script>"
    shown = await api.get(location)
    assert shown.status == 200 and "queued" in shown.body and 'href="/artifacts/1"' in shown.body
    assert "<script>alert(1)" not in shown.body and "&lt;script&gt;alert(1)" in shown.body
    assert (await api.get("/verifications/424242")).status == 404
    assert f'href="/verifications/{row.id}"' in (await api.get("/artifacts/1")).body
    assert (await _post(api, "/artifacts/424242/verify", {"csrf": csrf}))[0] == 404


async def test_private_reads_take_the_signed_in_cookie(make_api: MakeApi) -> None:  # noqa: F811
    api = await make_api(settings=settings_with(private_reads=True))
    async with api.client.get("/") as resp:
        assert resp.status == 401
    assert (await api.get("/signin")).status == 200
    await _signed_in(api)
    assert (await api.get("/")).status == 200
    assert (await api.get("/v1/artifacts")).status == 401  # the API itself still wants its bearer token
