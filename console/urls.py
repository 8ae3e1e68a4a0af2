from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.defaults import page_not_found

from console.metrics import metrics_view


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """JSON under /api/ (the admin API's error shape), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": f"No API endpoint at '{request.path}'."}, status=404)
    return page_not_found(request, exception)


handler404 = not_found


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/", include("console.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("console.pages.urls")),
]
