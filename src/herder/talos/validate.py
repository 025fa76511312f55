"""Validation of a machine config against its version contract, as Talos would accept or refuse it.

Each document is checked against the JSON schema Talos published for the contract (shipped in
``schemas/``), with the known quirks of those schemas worked around:

- the deprecated top-level ``persist`` is dropped, the generator still writes it but no schema lists it;
- two kind enums are wrong (``KubeSpanEndpoints``, ``UnattendedInstall``) and are corrected to the kinds
  Talos registers;
- ``machine.acceptedCAs`` and ``cluster.acceptedCAs`` are lists of ``{crt}`` in Talos (what ``talosctl
  rotate-ca`` writes), but the schemas describe one ``{crt}`` object: they are read as lists of them;
- a release's schema hides the fields it deprecated although its decoder still accepts them (1.12
  hides ``machine.install.extraKernelArgs`` that its own generator writes), so each definition also
  accepts the fields earlier shipped schemas listed for it.

Then the cross-field rules of ``config_rules`` apply. Compiled validators are cached per contract and
document kind, so validating many configs costs only the validation itself.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from herder.talos.config_rules import ConfigIssue, TypedDocument, cross_field_issues
from herder.talos.contracts import SUPPORTED, VersionContract
from herder.talos.documents import LEGACY_KIND, describe_yaml_error, is_legacy, load_documents

__all__ = ["ConfigInvalid", "ConfigIssue", "check_config", "check_documents", "validate_config"]

_KIND_FIXES = {"KubeSpanEndpoints": "KubeSpanEndpointsConfig", "UnattendedInstall": "UnattendedInstallConfig"}

# Kinds Talos registers without ever publishing them in a schema, with the first contract knowing them.
_UNPUBLISHED_KINDS = {"ImageVerificationConfig": VersionContract(1, 13)}

_LEGACY_DEFINITION = "v1alpha1.Config"


class ConfigInvalid(ValueError):
    """A config Talos would refuse; ``issues`` says where and why."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("invalid machine config: " + "; ".join(str(issue) for issue in self.issues))


def validate_config(config_yaml: str, contract: VersionContract | str) -> None:
    """Raise ``ConfigInvalid`` unless the config is valid for the contract (``1.12``, ``v1.12.3``…)."""
    issues = check_config(config_yaml, contract)
    if issues:
        raise ConfigInvalid(issues)


def check_config(config_yaml: str, contract: VersionContract | str) -> list[ConfigIssue]:
    """Every issue of a multi-document config for the contract; empty when valid.

    Raises ``UnknownTalosVersion`` (a ``ValueError``) for a contract herder does not support.
    """
    contract = _contract(contract)
    try:
        documents = load_documents(config_yaml)
    except yaml.YAMLError as exc:
        return [ConfigIssue("config", "", f"malformed YAML: {describe_yaml_error(exc)}")]
    return check_documents(documents, contract)


def check_documents(documents: Sequence[Any], contract: VersionContract | str) -> list[ConfigIssue]:
    """Every issue of already parsed config documents for the contract; empty when valid."""
    contract = _contract(contract)
    issues: list[ConfigIssue] = []
    legacy: dict[str, Any] | None = None
    typed: list[TypedDocument] = []
    for index, document in enumerate(documents):
        if not isinstance(document, dict):
            issues.append(ConfigIssue(f"document {index + 1}", "", "a config document must be a map"))
            continue
        if is_legacy(document) or ("kind" not in document and document.get("version") == LEGACY_KIND):
            if legacy is not None:
                issues.append(ConfigIssue(LEGACY_KIND, "", "duplicate v1alpha1 document"))
                continue
            legacy = document
            body = {key: value for key, value in document.items() if key != "persist"}
            issues += _schema_issues(body, LEGACY_KIND, _LEGACY_DEFINITION, contract)
            continue
        if not document.get("kind") or not document.get("apiVersion"):
            missing = "kind" if not document.get("kind") else "apiVersion"
            issues.append(ConfigIssue(f"document {index + 1}", missing, f"missing {missing}"))
            continue
        doc = TypedDocument(str(document["kind"]), str(document.get("name") or ""), document)
        typed.append(doc)
        definition = _definitions(contract).by_kind.get(doc.kind)
        if definition is not None:
            issues += _schema_issues(document, doc.label, definition, contract)
        elif doc.kind not in _UNPUBLISHED_KINDS or contract < _UNPUBLISHED_KINDS[doc.kind]:
            issues.append(
                ConfigIssue(doc.label, "kind", f"unknown document kind {doc.kind} for Talos {contract}")
            )
    return issues + cross_field_issues(legacy, typed)


def _contract(contract: VersionContract | str) -> VersionContract:
    return contract if isinstance(contract, VersionContract) else VersionContract.parse(contract)


class _Definitions:
    """The definitions of a contract's schema, hidden deprecated fields restored; kinds to definitions."""

    def __init__(self, contract: VersionContract) -> None:
        merged: dict[str, Any] = {}
        for earlier in (c for c in SUPPORTED if c <= contract):
            for name, definition in _schema(earlier)["$defs"].items():
                known = merged.get(name, {}).get("properties", {})
                merged[name] = copy.deepcopy(definition)
                if "properties" in definition:
                    merged[name]["properties"] = {**known, **merged[name]["properties"]}
                accepted = merged[name].get("properties", {}).get("acceptedCAs")
                if name.startswith("v1alpha1.") and accepted is not None and accepted.get("type") == "object":
                    merged[name]["properties"]["acceptedCAs"] = {"type": "array", "items": accepted}
                kind = merged[name].get("properties", {}).get("kind", {})
                if "enum" in kind:
                    kind["enum"] = [_KIND_FIXES.get(k, k) for k in kind["enum"]]
        self.defs = merged
        self.by_kind: dict[str, str] = {}
        for root in _schema(contract)["oneOf"]:
            name = root["$ref"].removeprefix("#/$defs/")
            for kind in merged[name].get("properties", {}).get("kind", {}).get("enum", []):
                self.by_kind[kind] = name


@cache
def _schema(contract: VersionContract) -> dict[str, Any]:
    # A development line ships the schema of Talos's main branch, named ``talos-X.Y-dev``.
    folder = resources.files("herder.talos").joinpath("schemas")
    released = folder.joinpath(f"talos-{contract}.schema.json")
    text = (
        released if released.is_file() else folder.joinpath(f"talos-{contract}-dev.schema.json")
    ).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _definitions(contract: VersionContract) -> _Definitions:
    return _Definitions(contract)


@cache
def _validator(contract: VersionContract, definition: str) -> Draft202012Validator:
    defs = _definitions(contract).defs
    return Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{definition}"})


def _schema_issues(
    document: dict[str, Any], label: str, definition: str, contract: VersionContract
) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for error in _validator(contract, definition).iter_errors(document):
        if not _decodes_as_string(error):
            issues += _describe(label, error, contract)
    return issues


def _decodes_as_string(error: ValidationError) -> bool:
    """Whether Talos would take the value anyway: its YAML decoder puts any scalar into a string field
    (``ip_forward: 1`` is the sysctl value ``"1"``)."""
    expected = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
    return error.validator == "type" and "string" in expected and isinstance(error.instance, int | float)


def _describe(label: str, error: ValidationError, contract: VersionContract) -> list[ConfigIssue]:
    path = _path(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = schema.get("properties", {})
        return [
            ConfigIssue(label, _join(path, str(key)), f"unknown field for Talos {contract}")
            for key in instance
            if key not in known
        ]
    if error.validator == "required" and isinstance(instance, dict):
        return [
            ConfigIssue(label, _join(path, str(key)), "required field is missing")
            for key in error.validator_value
            if key not in instance
        ]
    if error.validator == "type":
        return [
            ConfigIssue(label, path, f"expected {_types(error.validator_value)}, got {_json_type(instance)}")
        ]
    if error.validator in ("oneOf", "anyOf") and error.context:
        return _describe(label, best_match(error.context), contract)
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        return [ConfigIssue(label, path, f"{json.dumps(instance)} is not one of {allowed}")]
    return [
        ConfigIssue(label, path, error.message if len(error.message) <= 200 else error.message[:197] + "...")
    ]


def _path(segments: Sequence[Any]) -> str:
    text = ""
    for segment in segments:
        text = f"{text}[{segment}]" if isinstance(segment, int) else _join(text, str(segment))
    return text


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _types(expected: Any) -> str:
    return " or ".join(expected) if isinstance(expected, list) else str(expected)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
