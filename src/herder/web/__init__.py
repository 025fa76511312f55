"""herder's web UI: server-rendered pages over the API, served by ``herder serve`` under ``/ui``.

Every page and action reaches objects through the API app in-process, as the signed-in user
(``herder.web.caller``), so the UI shows and does exactly what the API lets that identity see and do.
"""
