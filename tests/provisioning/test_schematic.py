"""Image Factory schematic IDs, computed offline exactly as the factory computes them: the factory's own
test vectors, IDs users know from the factory, strict decoding, and the image references made from them;
and ``herder talos schematic id -f FILE``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from herder.resources.provisioning import MachineRequestSpec
from herder.resources.schematic import Schematic, boot_image_url, installer_image
from tests.api.server import HERDER

EMPTY = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

# (document, ID): the factory's vectors (pkg/schematic/schematic_test.go), then IDs it serves for
# well-known schematics.
VECTORS: list[tuple[str, str]] = [
    ("{}", EMPTY),
    ("customization: {}", EMPTY),
    ('customization: {"extraKernelArgs": []}', EMPTY),
    (
        '{"customization": {"extraKernelArgs": ["noapic", "nolapic"]}}',
        "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
    ),
    (
        '{"customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {}}}',
        "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
    ),
    (
        '{"customization": {"meta": [{"key": 10, "value": "foo"}], "extraKernelArgs": [], "systemExtensions": {}}}',
        "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f",
    ),
    (
        '{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}',
        "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
    ),
    (
        '{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"},"customization":{}}',
        "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
    ),
    (
        '{"customization":{"secureboot": {"includeWellKnownCertificates": true}}}',
        "fa8e05f142a851d3ee568eb0a8e5841eaf6b0ebc8df9a63df16ac5ed2c04f3e6",
    ),
    (
        "customization:\n  systemExtensions:\n    officialExtensions:\n"
        "      - siderolabs/iscsi-tools\n      - siderolabs/util-linux-tools\n",
        "613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245",
    ),
    (
        "customization: {systemExtensions: {officialExtensions: [siderolabs/qemu-guest-agent]}}",
        "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515",
    ),
]


@pytest.mark.parametrize(("document", "expected"), VECTORS)
def test_ids_are_the_factorys(document: str, expected: str) -> None:
    assert Schematic.model_validate(yaml.safe_load(document)).id() == expected


def test_the_canonical_form_quotes_what_yaml_would_misread() -> None:
    args = ["console=ttyS0", "a: b", "true", "10", "- x", "-x"]
    schematic = Schematic.model_validate({"customization": {"extraKernelArgs": args}})
    assert schematic.canonical().splitlines()[2:] == [
        "        - console=ttyS0",
        "        - 'a: b'",
        '        - "true"',
        '        - "10"',
        "        - '- x'",
        "        - -x",
    ]


@pytest.mark.parametrize(
    "document",
    [
        {"customization": {"extensions": []}},
        {"overlay": {"image": "x", "bogus": 1}},
        {"customization": {"meta": [{"key": 256}]}},
    ],
)
def test_schematics_are_decoded_strictly(document: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Schematic.model_validate(document)


def test_images_are_made_from_the_id() -> None:
    schematic = Schematic.model_validate({"customization": {"extraKernelArgs": ["noapic", "nolapic"]}})
    id_ = "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"
    assert installer_image(schematic, "1.13.2") == f"factory.talos.dev/metal-installer/{id_}:v1.13.2"
    assert installer_image(schematic, "v1.13.2", "aws") == f"factory.talos.dev/aws-installer/{id_}:v1.13.2"
    assert (
        boot_image_url(schematic, "v1.13.2")
        == f"https://factory.talos.dev/image/{id_}/v1.13.2/metal-amd64.iso"
    )
    # Nothing customized: Talos's own installer.
    assert installer_image(Schematic(), "v1.13.2") == "ghcr.io/siderolabs/installer:v1.13.2"


def test_a_request_schematic_with_its_kernel_args_is_the_factorys() -> None:
    spec = MachineRequestSpec.model_validate(
        {
            "providerID": "p",
            "talosVersion": "v1.13.2",
            "schematic": {"extraKernelArgs": ["noapic"], "meta": [{"key": 10, "value": "foo"}]},
            "kernelArgs": ["nolapic"],
        }
    )
    expected = Schematic.model_validate(
        {"customization": {"extraKernelArgs": ["noapic", "nolapic"], "meta": [{"key": 10, "value": "foo"}]}}
    )
    assert spec.factory_schematic().id() == expected.id()


def test_herder_talos_schematic_id_prints_the_id_offline(tmp_path: Path) -> None:
    path = tmp_path / "schematic.yaml"
    path.write_text(VECTORS[9][0])
    shown = subprocess.run(
        [HERDER, "talos", "schematic", "id", "-f", str(path)], capture_output=True, text=True
    )
    assert shown.returncode == 0 and shown.stdout == VECTORS[9][1] + "\n"
    path.write_text("customization: {systemExtension: {}}\n")
    refused = subprocess.run(
        [HERDER, "talos", "schematic", "id", "-f", str(path)], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "customization.systemExtension: unknown field" in refused.stderr
