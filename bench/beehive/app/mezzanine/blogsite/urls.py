from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView

admin.autodiscover()

urlpatterns = [
    path("admin/", include(admin.site.urls)),
    path("", TemplateView.as_view(template_name="index.html"), name="home"),
    # Mezzanine's own: comment/ (mezzanine.generic), blog/ with its archive, pages.
    path("", include("mezzanine.urls")),
]

handler404 = "mezzanine.core.views.page_not_found"
handler500 = "mezzanine.core.views.server_error"
