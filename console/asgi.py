"""ASGI entry point: HTTP through Django (ingress, API, console); websockets come with the live console."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_application = get_asgi_application()

application = ProtocolTypeRouter({"http": django_application})
