from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.generic import RedirectView


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # The operations console comes with its own issue; until then the Django admin is the console.
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
