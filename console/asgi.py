"""ASGI entry point: ``/ase/...`` goes to the ingress (console.ingress, an ASGI app of its own);
everything else (API, console, admin) to Django. Websockets come with the live console."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_application = get_asgi_application()

from console import ingress  # noqa: E402  (needs the settings configured above)


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["path"].startswith(ingress.PREFIX):
        return await ingress.application(scope, receive, send)
    return await django_application(scope, receive, send)


application = ProtocolTypeRouter({"http": http_application})
