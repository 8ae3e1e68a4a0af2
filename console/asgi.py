"""ASGI entry point: ``/ase/...`` goes to the ingress (console.ingress, an ASGI app of its own);
everything else over HTTP (API, console, admin) to Django; websockets (the live console) to Channels,
with the session's user and an origin check."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.urls import path  # noqa: E402

django_application = get_asgi_application()

from console import ingress  # noqa: E402  (needs the settings configured above)
from console.live import DashboardConsumer  # noqa: E402


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["path"].startswith(ingress.PREFIX):
        return await ingress.application(scope, receive, send)
    return await django_application(scope, receive, send)


websocket_application = AllowedHostsOriginValidator(
    AuthMiddlewareStack(URLRouter([path("ws/dashboard/", DashboardConsumer.as_asgi())]))
)

application = ProtocolTypeRouter({"http": http_application, "websocket": websocket_application})
