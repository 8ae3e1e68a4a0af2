"""ASGI entry point.

Ingress requests (``/ase/...``) go to a Django handler without the middleware
stack: the ingress uses no session, authentication, CSRF or static files, and
Django runs every ``MiddlewareMixin`` hook of an async request through a thread
hop, which cost the ingress most of its throughput (measured in
docs/BENCHMARKS.md). Everything else (API, console, admin) goes through the
full stack. Websockets come with the live console.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402

django_application = get_asgi_application()


class IngressHandler(ASGIHandler):
    """Django's ASGI handler with no middleware: URL resolution, the view, exception handling."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        get_response = self._get_response_async if is_async else self._get_response
        self._middleware_chain = convert_exception_to_response(get_response)


ingress_application = IngressHandler()


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["path"].startswith("/ase/"):
        return await ingress_application(scope, receive, send)
    return await django_application(scope, receive, send)


application = ProtocolTypeRouter({"http": http_application})
