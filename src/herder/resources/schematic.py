"""Image Factory schematics: what goes into a Talos boot image (system extensions, extra kernel arguments,
META values, an overlay), their ID, and the image references made from it.

The ID is what the Image Factory computes (siderolabs/image-factory ``pkg/schematic``): the lowercase hex
SHA-256 of the schematic's canonical YAML, which is go-yaml's encoding of its Go struct: keys in the
struct's field order, four-space indentation with sequences indented under their key, empty fields left
out except ``customization``, which is always written. A schematic file is decoded strictly, as the
factory decodes it (unknown fields are refused). Herder and the provider SDK compute IDs offline; nothing
here talks to a factory.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

FACTORY = "factory.talos.dev"
"""The Image Factory whose image references herder writes."""
DEFAULT_INSTALLER = "ghcr.io/siderolabs/installer"
"""The installer of a machine whose schematic customizes nothing (Talos's own image)."""


class Overlay(BaseModel):
    model_config = _STRICT

    image: str = ""
    name: str = ""
    options: dict[str, Any] = {}


class MetaValue(BaseModel):
    model_config = _STRICT

    key: int = Field(ge=0, le=255, description="the META key (0-255)")
    value: str = ""


class SystemExtensions(BaseModel):
    model_config = _STRICT

    official_extensions: list[str] = Field(default_factory=list, alias="officialExtensions")


class SecureBoot(BaseModel):
    model_config = _STRICT

    include_well_known_certificates: bool = Field(default=False, alias="includeWellKnownCertificates")


class Customization(BaseModel):
    model_config = _STRICT

    extra_kernel_args: list[str] = Field(default_factory=list, alias="extraKernelArgs")
    meta: list[MetaValue] = []
    system_extensions: SystemExtensions = Field(default_factory=SystemExtensions, alias="systemExtensions")
    secureboot: SecureBoot = Field(default_factory=SecureBoot)


class Schematic(BaseModel):
    """A schematic in the factory's own format (``{overlay, customization}``)."""

    model_config = _STRICT

    overlay: Overlay = Field(default_factory=Overlay)
    customization: Customization = Field(default_factory=Customization)

    def canonical(self) -> str:
        """The factory's canonical YAML of this schematic (what its ID hashes)."""
        c = self.customization
        customization: list[tuple[str, Any]] = [
            ("extraKernelArgs", c.extra_kernel_args),
            ("meta", [[("key", m.key), ("value", m.value)] for m in c.meta]),
            ("systemExtensions", [("officialExtensions", c.system_extensions.official_extensions)]),
            ("secureboot", [("includeWellKnownCertificates", c.secureboot.include_well_known_certificates)]),
        ]
        o = self.overlay
        overlay = [("image", o.image), ("name", o.name), ("options", _sorted_map(o.options))]
        document: list[tuple[str, Any]] = []
        if o.image or o.name or o.options:
            # The overlay's own fields are not omitempty: once it is there, image and name always are.
            document.append(("overlay", [(k, v) for k, v in overlay if k != "options" or o.options]))
        document.append(("customization", _omit_empty(customization)))
        return "".join(_emit_mapping(document, 0))

    def id(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    @property
    def empty(self) -> bool:
        return self == Schematic()


def installer_image(schematic: Schematic, talos_version: str, platform: str = "metal") -> str:
    """The installer a machine of this schematic installs with: Talos's own for an empty schematic,
    else the factory's ``<platform>-installer`` of the schematic's ID."""
    version = talos_version if talos_version.startswith("v") else f"v{talos_version}"
    if schematic.empty:
        return f"{DEFAULT_INSTALLER}:{version}"
    return f"{FACTORY}/{platform}-installer/{schematic.id()}:{version}"


def boot_image_url(
    schematic: Schematic, talos_version: str, platform: str = "metal", arch: str = "amd64", ext: str = "iso"
) -> str:
    """Where the factory serves this schematic's boot media (``metal-amd64.iso``, ``nocloud-amd64.raw.xz``)."""
    version = talos_version if talos_version.startswith("v") else f"v{talos_version}"
    return f"https://{FACTORY}/image/{schematic.id()}/{version}/{platform}-{arch}.{ext}"


# --- go-yaml's encoding, for the shapes a schematic has ---

Node = Any  # a scalar, a list of nodes, or a mapping as a list of (key, node) pairs


def _sorted_map(value: Any) -> Any:
    """A free-form map (overlay options) as go-yaml writes one: keys sorted, nested maps too."""
    if isinstance(value, dict):
        return [(str(k), _sorted_map(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))]
    if isinstance(value, list):
        return [_sorted_map(v) for v in value]
    return value


def _is_mapping(node: Node) -> bool:
    return isinstance(node, list) and all(isinstance(i, tuple) and len(i) == 2 for i in node) and bool(node)


def _empty(node: Node) -> bool:
    if isinstance(node, bool):
        return node is False
    if isinstance(node, int | float):
        return node == 0
    if isinstance(node, str | list):
        return len(node) == 0
    return node is None


def _omit_empty(mapping: list[tuple[str, Node]]) -> list[tuple[str, Node]]:
    """``omitempty``: fields with a zero value go; a struct is zero when all of its fields are."""
    out = []
    for key, value in mapping:
        if _is_mapping(value):
            value = _omit_empty(value)
        if not _empty(value):
            out.append((key, value))
    return out


def _emit_mapping(mapping: list[tuple[str, Node]], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, value in mapping:
        if _is_mapping(value):
            lines.append(f"{pad}{key}:\n")
            lines.extend(_emit_mapping(value, indent + 4))
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{key}:\n")
            lines.extend(_emit_sequence(value, indent + 4))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: {{}}\n" if key == "customization" else f"{pad}{key}: []\n")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}\n")
    if not mapping and indent == 0:
        return ["{}\n"]
    return lines


def _emit_sequence(items: list[Node], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for item in items:
        if _is_mapping(item):
            inner = _emit_mapping(item, indent + 2)
            lines.append(f"{pad}- {inner[0].lstrip()}")
            lines.extend(inner[1:])
        elif isinstance(item, list) and item:
            inner = _emit_sequence(item, indent + 2)
            lines.append(f"{pad}- {inner[0].lstrip()}")
            lines.extend(inner[1:])
        else:
            lines.append(f"{pad}- {_scalar(item) if not isinstance(item, list) else '[]'}\n")
    return lines


# Plain scalars YAML would read as something other than a string (go-yaml also quotes YAML 1.1's
# booleans and base-60 numbers, which older decoders would misread).
_NOT_STRING = re.compile(
    r"^(?:~|null|Null|NULL|true|True|TRUE|false|False|FALSE|y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF"
    r"|[-+]?(?:\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN"
    r"|[-+]?(?:0|[1-9][0-9_]*)|0o?[0-7_]+|0x[0-9a-fA-F_]+|0b[01_]+"
    r"|[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*(?:[eE][-+]?[0-9]+)"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|<<)$"
)
_INDICATORS = set("#,[]{}&*!|>'\"%@`")


def _scalar(value: Node) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return "null"
    text = str(value)
    if _NOT_STRING.match(text) or text == "":
        return _double_quoted(text)
    if _plain_allowed(text):
        return text
    if all(c.isprintable() for c in text):
        return "'" + text.replace("'", "''") + "'"
    return _double_quoted(text)


def _plain_allowed(text: str) -> bool:
    """go-yaml's test for a plain scalar in block context (``yaml_emitter_analyze_scalar``)."""
    if text.startswith(("---", "...")) or text[0] in " \t" or text[-1] in " \t":
        return False
    first = text[0]
    if first in _INDICATORS:
        return False
    if first in "?:-" and (len(text) == 1 or text[1] in " \t"):
        return False
    for i, c in enumerate(text):
        if not c.isprintable():
            return False
        if c == ":" and (i + 1 == len(text) or text[i + 1] in " \t"):
            return False
        if c == "#" and i > 0 and text[i - 1] in " \t":
            return False
    return True


def _double_quoted(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'
