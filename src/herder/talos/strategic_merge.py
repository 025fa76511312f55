"""Talos's strategic merge of one config document into another, on YAML trees.

Talos merges decoded Go structs (``pkg/machinery/config/merge``); herder merges the YAML trees and
carries the struct knowledge that matters as a table of per-field rules:

- maps merge key by key; scalars replace, except that an empty string or zero never overwrites (a Go
  zero value is indistinguishable from an absent field) while ``false`` always does;
- lists are appended, except the fields Talos replaces (``merge:"replace"``), the lists Talos merges by
  a key (network interfaces by name or device selector, VLANs by id, admission plugins by name,
  extension config files by mount path, image verification rules by image), and ``extraArgs``, which
  merge per argument with each argument replaced whole.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from herder.talos.documents import LEGACY_KIND


class MergeError(ValueError):
    """Two values that cannot be merged (a map on one side, a list or scalar on the other)."""


@dataclass(frozen=True)
class _KeyedList:
    """A list merged element by element: a right element merges into the left one with the same key."""

    keys: tuple[str, ...]
    """Identity fields, tried in order; the first one the right element sets decides."""
    replace_items: bool = False
    """A matching element is replaced rather than merged."""


_REPLACE = "replace"
_ARGS = "args"
_Rule = _KeyedList | str

_ANY = "*"
"""Path segment standing for any element of a list."""


def _args(*paths: str) -> dict[tuple[str, ...], _Rule]:
    return {tuple(p.split(".")): _ARGS for p in paths}


def _replace(*paths: str) -> dict[tuple[str, ...], _Rule]:
    return {tuple(p.split(".")): _REPLACE for p in paths}


_RULES: dict[str, dict[tuple[str, ...], _Rule]] = {
    LEGACY_KIND: {
        **_replace(
            "cluster.network.podSubnets", "cluster.network.serviceSubnets", "cluster.apiServer.auditPolicy"
        ),
        **_args(
            "machine.kubelet.extraArgs",
            "cluster.apiServer.extraArgs",
            "cluster.controllerManager.extraArgs",
            "cluster.proxy.extraArgs",
            "cluster.scheduler.extraArgs",
            "cluster.etcd.extraArgs",
        ),
        ("machine", "network", "interfaces"): _KeyedList(("interface", "deviceSelector")),
        ("machine", "network", "interfaces", _ANY, "vlans"): _KeyedList(("vlanId",)),
        ("cluster", "apiServer", "admissionControl"): _KeyedList(("name",)),
    },
    "KubeNetworkConfig": _replace("podSubnets", "serviceSubnets"),
    "KubeAuditPolicyConfig": _replace("configuration"),
    "KubeAuthenticationConfig": _replace("configuration"),
    "KubeCredentialProviderConfig": _replace("configuration"),
    "KubeStaticPodConfig": _replace("pod"),
    "CRIBaseRuntimeSpecConfig": _replace("overrides"),
    "NetworkRuleConfig": _replace("ingress", "portSelector.ports"),
    "BGPInstanceConfig": _replace("advertise", "importRoutes", "neighbors"),
    "KubeAPIServerConfig": _args("extraArgs"),
    "KubeControllerManagerConfig": _args("extraArgs"),
    "KubeletConfig": _args("extraArgs"),
    "KubeProxyConfig": _args("extraArgs"),
    "KubeSchedulerConfig": _args("extraArgs"),
    "ExtensionServiceConfig": {("configFiles",): _KeyedList(("mountPath",))},
    "ImageVerificationConfig": {("rules",): _KeyedList(("image",), replace_items=True)},
}


def merge_document(left: dict[str, Any], right: dict[str, Any], kind: str) -> None:
    """Merge ``right`` into ``left`` (modified in place) with the rules of documents of ``kind``."""
    _merge_map(left, right, (), _RULES.get(kind, {}))


def _merge_map(
    left: dict[str, Any], right: dict[str, Any], path: tuple[str, ...], rules: dict[tuple[str, ...], _Rule]
) -> None:
    for key, value in right.items():
        if key in left:
            left[key] = _merge(left[key], value, (*path, key), rules)
        elif value is not None:
            left[key] = copy.deepcopy(value)


def _merge(left: Any, right: Any, path: tuple[str, ...], rules: dict[tuple[str, ...], _Rule]) -> Any:
    if right is None:
        return left
    if left is None:
        return copy.deepcopy(right)
    rule = rules.get(path)
    if rule == _REPLACE:
        return copy.deepcopy(right)
    if isinstance(left, dict) != isinstance(right, dict) or isinstance(left, list) != isinstance(right, list):
        raise MergeError(
            f"cannot merge {_shape(right)} into {_shape(left)} at {'.'.join(path).replace('.' + _ANY, '[]')}"
        )
    if isinstance(right, dict):
        if rule == _ARGS:
            left.update(copy.deepcopy(right))
        else:
            _merge_map(left, right, path, rules)
        return left
    if isinstance(right, list):
        if isinstance(rule, _KeyedList):
            _merge_keyed(left, right, path, rules, rule)
            return left
        return left + copy.deepcopy(right)
    if isinstance(right, bool) or right not in ("", 0):
        return right
    return left


def _merge_keyed(
    left: list[Any],
    right: list[Any],
    path: tuple[str, ...],
    rules: dict[tuple[str, ...], _Rule],
    keyed: _KeyedList,
) -> None:
    for item in right:
        index = _find(left, item, keyed.keys)
        if index is None:
            left.append(copy.deepcopy(item))
        elif keyed.replace_items:
            left[index] = copy.deepcopy(item)
        else:
            left[index] = _merge(left[index], item, (*path, _ANY), rules)


def _find(items: list[Any], item: Any, keys: tuple[str, ...]) -> int | None:
    if not isinstance(item, dict):
        return None
    for key in keys:
        wanted = item.get(key)
        if wanted in (None, ""):
            continue
        for index, candidate in enumerate(items):
            if isinstance(candidate, dict) and candidate.get(key) == wanted:
                return index
        return None
    return None


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return "a scalar"
