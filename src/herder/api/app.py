"""herder's API as a Starlette app: ``krm`` over herder's kinds with herder's policy, plus the token
subresource through which ServiceAccounts and Users get bearer tokens.

``POST /apis/herder.dev/v1alpha1/{serviceaccounts|users}/{name}/token`` with a ``TokenRequest``
(``spec.expirationSeconds``, ``spec.description``) answers 201 with the new token in
``status.token``: the only time it is ever shown.

People sign in through ``herder.api.sign_in`` (``/auth/…``).

``GET /metrics`` serves the Prometheus metrics (store writes, reconciles, queue depths, and what each
``scrape`` source computes from the store as it is scraped: the clusters' health) to Admin and Support.

With ``machine_logs``, the machine logs herder keeps are served too (``herder.api.machine_logs``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from herder.api import sign_in, tokens
from herder.api.actions import ObjectAction, action_routes
from herder.api.machine_logs import routes as log_routes
from herder.api.policy import HerderPolicy
from herder.api.roles import TOKEN_SUBRESOURCE
from herder.api.self_reviews import ACCESS_PATH, AccessView, HerderReviews
from herder.krm import app as krm
from herder.krm import media
from herder.krm.policy import Access, Denied, Identity
from herder.krm.reviews import PATHS as REVIEW_PATHS
from herder.krm.status import ApiError, api_error, causes_of, invalid
from herder.resources.configuration import GROUP, VERSION
from herder.state.errors import NotFound
from herder.state.machine_logs import MachineLogs
from herder.state.store import Store

METRICS_ROLES = frozenset({"Admin", "Support"})

# Brings metrics computed from the store up to date before a scrape answers.
Scrape = Callable[[], Awaitable[None]]

_SUBJECTS = {info.plural: info for info, _ in tokens.SUBJECT_KINDS.values()}


class TokenRequestSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    expiration_seconds: int | None = Field(default=None, alias="expirationSeconds", ge=1)
    description: str = Field(default="", max_length=256)


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: str = Field(default=f"{GROUP}/{VERSION}", alias="apiVersion")
    kind: str = "TokenRequest"
    metadata: dict[str, object] = {}
    spec: TokenRequestSpec = TokenRequestSpec()


def build_app(
    store: Store,
    policy: HerderPolicy,
    actions: Sequence[ObjectAction] = (),
    *,
    max_body_bytes: int = krm.MAX_BODY_BYTES,
    machine_logs: MachineLogs | None = None,
    scrape: Sequence[Scrape] = (),
) -> Starlette:
    """The whole API of ``store``'s kinds; ``policy`` authenticates, authorizes and audits; ``actions``
    are the object actions the composition root gives in (see ``herder.api.actions``).

    A request body larger than ``max_body_bytes`` is answered 413, on every path that reads one.
    """

    async def issue_token(request: Request) -> Response:
        info = _SUBJECTS.get(request.path_params["plural"])
        name = request.path_params["name"]
        if info is None:
            return ApiError(
                404, f"{request.path_params['plural']} has no subresource {TOKEN_SUBRESOURCE!r}"
            ).response()
        access = Access("create", info, None, name, TOKEN_SUBRESOURCE)
        who: Identity | None = None
        try:
            who = await policy.authenticate(request)
            policy.authorize(who, access)
            raw = await media.read_body(request, max_body_bytes)
            try:
                asked = TokenRequest.model_validate(
                    media.parse_object(raw, media.JSON) if raw.strip() else {}
                )
            except ValidationError as err:
                raise invalid(info, name, causes_of(err)) from None
            subject = await store.get(info, name)
            if not policy.visible(who, info, subject.name, subject.metadata.labels):
                raise NotFound(info.plural, name)
            expires = asked.spec.expiration_seconds
            issued = await tokens.issue(
                store,
                info,
                name,
                expires_in=timedelta(seconds=expires) if expires is not None else None,
                description=asked.spec.description,
            )
        except Exception as exc:
            error = api_error(exc, info, name)
            await policy.record(who, access, request, error.code, error.message)
            return error.response()
        await policy.record(who, access, request, 201, f"issued token {issued.name}")
        body = {
            "apiVersion": info.api_version,
            "kind": "TokenRequest",
            "metadata": {"name": issued.name},
            "spec": asked.spec.model_dump(by_alias=True, exclude_none=True),
            "status": {"token": issued.token, "expirationTimestamp": issued.expires_at},
        }
        return Response(media.dumps(body), 201, media_type=media.JSON, headers={"Cache-Control": "no-store"})

    async def metrics(request: Request) -> Response:
        # Counters name controllers and kinds, hidden ones too: platform staff only.
        try:
            who = await policy.authenticate(request)
            if who.role not in METRICS_ROLES:
                raise Denied(f"{who.role} may not read the server's metrics")
        except Exception as exc:
            return api_error(exc).response()
        for refresh in scrape:
            await refresh()
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    api = krm.build_app(store.registry, store, policy, max_body_bytes=max_body_bytes)
    reviews = HerderReviews(store, policy)
    return Starlette(
        routes=[
            Route("/metrics", metrics, methods=["GET"]),
            *(Route(path, reviews) for path in REVIEW_PATHS),
            Route(ACCESS_PATH, AccessView(store, policy), methods=["GET"]),
            *sign_in.routes(store, policy),
            Route(
                f"/apis/{GROUP}/{VERSION}/{{plural}}/{{name}}/{TOKEN_SUBRESOURCE}",
                issue_token,
                methods=["POST"],
            ),
            *action_routes(store.registry, store, policy, actions),
            *(log_routes(store, policy, machine_logs) if machine_logs is not None else ()),
            Mount("", app=api),
        ]
    )
