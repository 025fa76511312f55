"""Offline checks of a template's patches against the cluster's Talos contract (that of ``talos.version``),
as the machines would get them: each must parse, touch nothing herder owns (``check_allowed``: cluster
name, endpoint, secrets, machine token and type, install disk…), and leave a config Talos accepts.

Configs are generated as herder's controllers generate them, from throwaway secrets (one bundle per
contract and process: making one costs an RSA key), with the cluster's patches on every machine, a
set's patches on its machines and a machine's patches on it, in that order. A patch that fails is
reported and left out, so the patches after it are judged on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from herder.talos.contracts import VersionContract
from herder.talos.generate import ConfigInput, GenerateError, MachineType, generate_config
from herder.talos.generate_input import parse_kubernetes_version
from herder.talos.patch_layers import check_allowed
from herder.talos.patches import PatchError, apply_patches, load_patch
from herder.talos.secrets import SecretsBundle, generate_secrets
from herder.talos.system_patches import disk_encryption
from herder.talos.validate import check_config
from herder.talos.versions import compatible_kubernetes
from herder.templates.documents import ClusterDoc, ControlPlaneDoc, MachineDoc, WorkersDoc
from herder.templates.problems import Problems
from herder.templates.template import Source, Template

# The endpoint checked configs carry when the template names none: herder's balancer picks the real one.
PLACEHOLDER_ENDPOINT = "https://cluster.invalid:6443"
DEFAULT_DISK = "/dev/sda"


@cache
def _throwaway_secrets(contract: VersionContract) -> SecretsBundle:
    return generate_secrets(contract)


def check_patches(template: Template, problems: Problems) -> None:
    """Add an error for every patch of the template that would not make a valid config.

    Version errors are reported on their own and do not hide the patches': with an invalid Kubernetes
    version the configs are generated for the newest one the Talos version supports; with an invalid
    Talos version there is no contract to check against, and each patch is only parsed and checked for
    what herder owns."""
    cluster = template.cluster
    if cluster is None:
        return
    try:
        contract = VersionContract.parse(cluster.talos.version)
    except ValueError:
        _check_alone(template, problems)
        return
    kubernetes = cluster.kubernetes.version
    try:
        parse_kubernetes_version(kubernetes)
    except GenerateError:
        supported = compatible_kubernetes(cluster.talos.version)
        if not supported:
            _check_alone(template, problems)
            return
        kubernetes = f"{supported[-1]}.0"
    cluster_source = template.source_of(cluster)
    sets = template.of(ControlPlaneDoc) + template.of(WorkersDoc)
    roles = {MachineType.CONTROLPLANE} | {MachineType.WORKER for _, d in sets if isinstance(d, WorkersDoc)}
    by_machine = {uuid: (source, d) for source, d in sets for uuid in d.machines}
    checker = _Checker(template, problems, cluster, contract, kubernetes)
    for role in sorted(roles):
        base = checker.base(role, DEFAULT_DISK)
        if base is None:
            return
        # Each patch is reported once, for the first role it fails on.
        checker.layer(base, [cluster_source], f"for {role} machines")
    for source, document in sets:
        role = MachineType.CONTROLPLANE if isinstance(document, ControlPlaneDoc) else MachineType.WORKER
        base = checker.base(role, DEFAULT_DISK)
        if base is not None:
            checker.layer(checker.layer(base, [cluster_source], "", report=False), [source], "")
    for source, machine in template.of(MachineDoc):
        owner = by_machine.get(machine.name)
        if owner is None:
            continue  # an unreferenced Machine document is an error of its own
        role = MachineType.CONTROLPLANE if isinstance(owner[1], ControlPlaneDoc) else MachineType.WORKER
        base = checker.base(role, machine.install.disk or DEFAULT_DISK)
        if base is not None:
            below = checker.layer(base, [cluster_source, owner[0]], "", report=False)
            checker.layer(below, [source], "")


def _check_alone(template: Template, problems: Problems) -> None:
    """Each patch parsed and checked for what herder owns, as far as it goes without a contract."""
    for source in template.sources:
        for i, (patch, text) in enumerate(template.patches(source)):
            if text is None:
                continue
            try:
                check_allowed(load_patch(text), patch.title)
            except PatchError as exc:
                problems.error(source.label, f"patches[{i}]", str(exc))


class _Checker:
    def __init__(
        self,
        template: Template,
        problems: Problems,
        cluster: ClusterDoc,
        contract: VersionContract,
        kubernetes: str,
    ):
        self._template = template
        self._problems = problems
        self._cluster = cluster
        self._contract = contract
        self._kubernetes = kubernetes
        self._reported: set[tuple[int, int]] = set()
        self._bases: dict[tuple[MachineType, str], str | None] = {}

    def base(self, role: MachineType, disk: str) -> str | None:
        """The generated config of a machine of ``role``, with herder's own patches."""
        if (role, disk) not in self._bases:
            self._bases[(role, disk)] = self._generate(role, disk)
        return self._bases[(role, disk)]

    def _generate(self, role: MachineType, disk: str) -> str | None:
        features = self._cluster.features
        try:
            config = generate_config(
                ConfigInput(
                    cluster_name=self._cluster.name,
                    endpoint=self._cluster.kubernetes.endpoint or PLACEHOLDER_ENDPOINT,
                    kubernetes_version=self._kubernetes,
                    contract=self._contract,
                    secrets=_throwaway_secrets(self._contract),
                    install_disk=disk,
                    kubespan=True if features.kube_span else None,
                ),
                role,
            )
        except GenerateError:
            return None  # the cluster's own fields are reported as such
        if features.disk_encryption:
            config = apply_patches(config, [load_patch(disk_encryption(self._contract))])
        return config

    def layer(self, config: str, sources: Iterable[Source], context: str, *, report: bool = True) -> str:
        """``config`` with the valid patches of ``sources`` applied in order; reports the others."""
        for source in sources:
            for i, (patch, text) in enumerate(self._template.patches(source)):
                if text is None:
                    continue
                key = (source.index, i)
                try:
                    loaded = load_patch(text)
                    check_allowed(loaded, patch.title)
                    patched = apply_patches(config, [loaded])
                except PatchError as exc:
                    self._report(report, key, source, i, str(exc))
                    continue
                issues = check_config(patched, self._contract)
                if issues:
                    where = f" {context}" if context else ""
                    listed = "; ".join(str(issue) for issue in issues)
                    self._report(
                        report,
                        key,
                        source,
                        i,
                        f"makes an invalid config for Talos {self._contract}{where}: {listed}",
                    )
                    continue
                config = patched
        return config

    def _report(self, report: bool, key: tuple[int, int], source: Source, i: int, message: str) -> None:
        if report and key not in self._reported:
            self._reported.add(key)
            self._problems.error(source.label, f"patches[{i}]", message)
