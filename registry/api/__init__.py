"""The REST API: an aiohttp application over the catalog (see `create_app`).

`create_app` is imported on first use: the command line reads the API's page builders
(`registry.api.pages`) without loading aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from registry.api.app import create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from registry.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app"]
