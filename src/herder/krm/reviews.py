"""The questions a caller asks an API server about itself, as Kubernetes answers them (a POST whose answer
is the question with its ``status``; nothing is stored):

- ``authentication.k8s.io/v1`` SelfSubjectReview: who am I (``kubectl auth whoami``);
- ``authorization.k8s.io/v1`` SelfSubjectAccessReview: may I do this (``kubectl auth can-i VERB RESOURCE``);
- ``authorization.k8s.io/v1`` SelfSubjectRulesReview: what may I do in a namespace (``kubectl auth can-i
  --list``).

``Reviews`` reads the question (JSON, or protobuf as kubectl sends it) and writes the answer; a server
says who asks and decides (``user_info``, ``access``, ``rules``) by its own policy.
"""

from __future__ import annotations

import abc
import json
from typing import Any, Generic, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from herder.krm import media, protobuf
from herder.krm.status import ApiError, api_error

AUTHENTICATION = "authentication.k8s.io"
AUTHORIZATION = "authorization.k8s.io"
PATHS = {
    f"/apis/{AUTHENTICATION}/v1/selfsubjectreviews": (
        AUTHENTICATION,
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
    f"/apis/{AUTHORIZATION}/v1/selfsubjectaccessreviews": (
        AUTHORIZATION,
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
    ),
    f"/apis/{AUTHORIZATION}/v1/selfsubjectrulesreviews": (
        AUTHORIZATION,
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
    ),
}
MAX_BODY = 1 << 20

Who = TypeVar("Who")


class Reviews(abc.ABC, Generic[Who]):
    """The three review resources, as an ASGI application (``PATHS`` says which path is which)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        group, plural, kind = PATHS[scope["path"]]
        try:
            response = await self._answer(request, group, plural, kind)
        except Exception as exc:
            response = api_error(exc).response()
        await response(scope, receive, send)

    @abc.abstractmethod
    async def authenticate(self, request: Request) -> Who:
        """Who asks (raise as the server's authentication does)."""

    def may_ask(self, who: Who, group: str, plural: str) -> None:
        """Raise unless ``who`` may create reviews of ``plural`` (Kubernetes: ``system:basic-user``)."""

    @abc.abstractmethod
    def user_info(self, who: Who) -> dict[str, Any]:
        """``status.userInfo`` of a SelfSubjectReview: username, uid, groups, extra."""

    @abc.abstractmethod
    async def access(self, who: Who, spec: dict[str, Any]) -> dict[str, Any]:
        """The status of a SelfSubjectAccessReview: ``allowed`` (and ``denied``, ``reason``)."""

    @abc.abstractmethod
    async def rules(self, who: Who, spec: dict[str, Any]) -> dict[str, Any]:
        """The status of a SelfSubjectRulesReview: ``resourceRules``, ``nonResourceRules``, ``incomplete``."""

    async def _answer(self, request: Request, group: str, plural: str, kind: str) -> Response:
        who = await self.authenticate(request)
        if request.method != "POST":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        self.may_ask(who, group, plural)
        content_type = media.media_type(request.headers.get("content-type")) or media.JSON
        body = await media.read_body(request, MAX_BODY)
        if content_type == protobuf.PROTOBUF:
            review = protobuf.decode(body)
        elif content_type == media.JSON:
            review = media.parse_object(body, media.JSON)
        else:
            raise ApiError(415, f"unsupported media type {content_type!r}: send application/json")
        if review.get("kind") not in (None, kind):
            raise ApiError(400, f"the body is a {review.get('kind')}, not a {kind}")
        spec = review.get("spec") or {}
        if not isinstance(spec, dict):
            raise ApiError(400, "spec must be an object")
        if kind == "SelfSubjectReview":
            status = {"userInfo": self.user_info(who)}
        elif kind == "SelfSubjectAccessReview":
            check_access_spec(spec)
            status = await self.access(who, spec)
        else:
            status = await self.rules(who, spec)
        answer = {
            "kind": kind,
            "apiVersion": f"{group}/v1",
            "metadata": {"creationTimestamp": None},
            **({"spec": spec} if kind != "SelfSubjectReview" else {}),
            "status": status,
        }
        return Response(json.dumps(answer).encode(), 201, media_type=media.JSON)


def check_access_spec(spec: dict[str, Any]) -> None:
    """Kubernetes' check of a SelfSubjectAccessReview: exactly one of the two attribute kinds."""
    if (spec.get("resourceAttributes") is None) == (spec.get("nonResourceAttributes") is None):
        raise ApiError(
            422,
            "SelfSubjectAccessReview is invalid: spec.resourceAttributes: Invalid value: exactly one of "
            "nonResourceAttributes or resourceAttributes must be specified",
        )
