"""The questions a caller asks the emulated kube-apiserver about itself, answered as Kubernetes answers them (a
POST whose answer is the question with its ``status``; nothing is stored):

- ``authentication.k8s.io/v1`` SelfSubjectReview: who am I (``kubectl auth whoami``);
- ``authorization.k8s.io/v1`` SelfSubjectAccessReview: may I do this (``kubectl auth can-i VERB RESOURCE``);
- ``authorization.k8s.io/v1`` SelfSubjectRulesReview: what may I do in a namespace (``kubectl auth can-i
  --list``).

Each needs ``create`` on its resource, which ``system:basic-user`` grants every authenticated user.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from herder.emu.cluster.access import RbacPolicy
from herder.emu.cluster.authorizer import Attributes
from herder.emu.cluster.identity import KubeUser
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


class Reviews:
    """The three review resources, as an ASGI application (``PATHS`` says which path is which)."""

    def __init__(self, policy: RbacPolicy) -> None:
        self.policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        group, plural, kind = PATHS[scope["path"]]
        try:
            response = await self._answer(request, group, plural, kind)
        except Exception as exc:
            response = api_error(exc).response()
        await response(scope, receive, send)

    async def _answer(self, request: Request, group: str, plural: str, kind: str) -> Response:
        who = await self.policy.authenticate(request)
        if request.method != "POST":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        self.policy.check(who, Attributes("create", group=group, resource=plural))
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
            status = {"userInfo": _user_info(who)}
        elif kind == "SelfSubjectAccessReview":
            status = self._access(who, spec)
        else:
            status = self._rules(who, spec)
        answer = {
            "kind": kind,
            "apiVersion": f"{group}/v1",
            "metadata": {"creationTimestamp": None},
            **({"spec": spec} if kind != "SelfSubjectReview" else {}),
            "status": status,
        }
        return Response(json.dumps(answer).encode(), 201, media_type=media.JSON)

    def _access(self, who: KubeUser, spec: dict[str, Any]) -> dict[str, Any]:
        resource, other = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if (resource is None) == (other is None):
            raise ApiError(
                422,
                "SelfSubjectAccessReview is invalid: spec.resourceAttributes: Invalid value: exactly one of "
                "nonResourceAttributes or resourceAttributes must be specified",
            )
        if resource is not None:
            a = Attributes(
                str(resource.get("verb") or ""),
                namespace=str(resource.get("namespace") or ""),
                group=str(resource.get("group") or ""),
                resource=str(resource.get("resource") or ""),
                subresource=str(resource.get("subresource") or ""),
                name=str(resource.get("name") or ""),
            )
            if not a.resource:
                a = Attributes(a.verb, path="")  # no resource: nothing matches, as in Kubernetes
        else:
            assert other is not None
            a = Attributes(str(other.get("verb") or ""), path=str(other.get("path") or ""))
        allowed, reason = self.policy.authorizer.authorize(who, a)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return status

    def _rules(self, who: KubeUser, spec: dict[str, Any]) -> dict[str, Any]:
        namespace = str(spec.get("namespace") or "")
        grants = self.policy.authorizer.grants(who, namespace)
        resource_rules: list[dict[str, Any]] = []
        url_rules: list[dict[str, Any]] = []
        for rule in grants.rules:
            shown = rule.to_dict()
            (url_rules if rule.urls else resource_rules).append(shown)
        status: dict[str, Any] = {
            "resourceRules": resource_rules,
            "nonResourceRules": url_rules,
            "incomplete": False,
        }
        if grants.errors:
            status["evaluationError"] = ", ".join(grants.errors)
        return status


def _user_info(who: KubeUser) -> dict[str, Any]:
    info: dict[str, Any] = {"username": who.name, "groups": list(who.groups)}
    if who.uid:
        info["uid"] = who.uid
    if who.extra:
        info["extra"] = {k: list(v) for k, v in who.extra}
    return info
