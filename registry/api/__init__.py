"""The REST API: an aiohttp application over the catalog (see `create_app`)."""

from registry.api.app import create_app

__all__ = ["create_app"]
