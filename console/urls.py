from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path

from console.ingress import ingress


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("ase/<str:service>/", ingress, name="ingress"),
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
