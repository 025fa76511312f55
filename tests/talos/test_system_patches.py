"""The system patches of managed control planes: valid on every contract, and where each contract's Talos
(and the emulator) reads them."""

from __future__ import annotations

import pytest

from herder.emu.machine.config import parse_config
from herder.emu.machine.kube_config import kube_facts
from herder.talos.contracts import SUPPORTED, VersionContract
from herder.talos.generate import MachineType, generate_config
from herder.talos.patch_layers import LayeredPatch, PatchLayer, apply_layers
from herder.talos.system_patches import kube_span, managed_control_plane
from herder.talos.validate import check_config
from tests.talos.test_generate import base_input


@pytest.mark.parametrize("contract", SUPPORTED, ids=str)
@pytest.mark.parametrize("register", [True, False])
def test_managed_patches_make_valid_control_plane_configs(contract: VersionContract, register: bool) -> None:
    base = generate_config(base_input(contract), MachineType.CONTROLPLANE)
    layers = [
        LayeredPatch(PatchLayer.SYSTEM, "herder-kubespan", kube_span(contract)),
        LayeredPatch(
            PatchLayer.SYSTEM, "herder-cp", managed_control_plane(contract, register_nodes=register)
        ),
    ]
    config = apply_layers(base, layers)
    assert check_config(config, contract) == []
    assert "0.0.0.0:2381" in config and "bind-address: 0.0.0.0" in config
    assert kube_facts(parse_config(config.encode(), f"v{contract}.0")).register_node is register
    assert "kubespan" in config.lower()
