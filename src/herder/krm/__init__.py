"""Generic Kubernetes-style HTTP machinery over any kind registry and store.

``app.build_app(registry, store, policy)`` is the whole API as a Starlette app: discovery
(``discovery``), the resource verbs (``handlers``), PATCH types (``patch``), streamed watches
(``watch``), Table output (``table``), ``Status`` errors (``status``), OpenAPI (``openapi``), and
request bodies and content negotiation (``media``). ``policy`` holds the hooks a server plugs in to
decide who may do what.
"""
