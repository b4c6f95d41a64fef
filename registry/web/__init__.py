"""The web catalog: server-rendered pages over the same catalog reads as the API.

`mount(app)` adds its routes (named `web_*`), its stylesheet and the security headers of
every response to the API's application."""

from registry.web.app import mount

__all__ = ["mount"]
