"""Which files of the catalog hold given bytes: a lookup by sha256.

The hub lists every LFS file with its sha256 (its oid), and the catalog keeps it per shard.
Someone holding a GGUF file, or a hub that wants its copies, asks by hash which repos,
artifacts and shards have those bytes, and where to download each from.
"""

from __future__ import annotations

import re

from aiohttp import web

from registry.api import present, reads
from registry.api.errors import InvalidParameter, NotFound
from registry.api.keys import SETTINGS_KEY
from registry.api.params import parse_query
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.responses import FileMatches

routes = web.RouteTableDef()

SHA256_PATTERN = "^[0-9a-fA-F]{64}$"
_SHA256 = re.compile(SHA256_PATTERN)


@routes.get("/v1/files/{sha256}", name="get_files")
async def get_files(request: web.Request) -> web.Response:
    parse_query(request, ())
    sha = request.match_info["sha256"]
    if not _SHA256.fullmatch(sha):
        raise InvalidParameter("sha256", "sha256 must be 64 hexadecimal digits")
    sha = sha.lower()
    async with read_session(request) as session:
        rows, count = await reads.files_with_sha256(session, sha)
    if not rows:
        raise NotFound(f"no file with sha256 {sha} in the catalog", details={"sha256": sha})
    endpoint = request.app[SETTINGS_KEY].hub.endpoint
    return json_response(FileMatches(sha256=sha, count=count, files=[present.file_match(r, endpoint) for r in rows]))
