from django.contrib.auth import views as auth_views
from django.urls import path

from console.pages import areas, audit, component, dashboard, jobs, reports, search, units

app_name = "console"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("processes/<str:process>/<str:action>", dashboard.process, name="process"),
    path("units/", units.unit_list, name="units"),
    path("units/deploy/", units.deploy, name="deploy"),
    path("units/<str:service>/", units.unit_detail, name="unit"),
    path("units/<str:service>/undeploy/", units.undeploy, name="undeploy"),
    path("units/<str:service>/<str:action>", units.unit_action, name="unit-action"),
    path("search/", search.search, name="search"),
    path("areas/", areas.area_list, name="areas"),
    path("areas/<str:service>/<str:subtype>/", areas.area_browser, name="area"),
    path("areas/<str:service>/<str:subtype>/confirm", areas.area_confirm, name="area-confirm"),
    path("areas/<str:service>/<str:subtype>/run", areas.area_action, name="area-action"),
    path("messages/<str:message_id>/", areas.message, name="message"),
    path("messages/<str:message_id>/payload", areas.message_payload, name="message-payload"),
    path("messages/<str:message_id>/attachments/<str:name>", areas.message_attachment, name="message-attachment"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job"),
    path("reports/", reports.report_list, name="reports"),
    path("reports/launch", reports.report_launch, name="report-launch"),
    path("reports/<int:report_id>/", reports.report_detail, name="report"),
    path("audit/", audit.audit_list, name="audit"),
    path("component/", component.component, name="component"),
]
