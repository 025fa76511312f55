"""Every controller herder runs, and the admission checks of herder's kinds: what ``herder serve`` wires."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herder.controllers.access.disabled_users import DisabledUserController
from herder.controllers.backups.admission import RestoreAdmission
from herder.controllers.backups.key_cleanup import BackupKeyCleanupController
from herder.controllers.backups.policy import BackupPolicy, managed_policy
from herder.controllers.backups.removal import EtcdBackupRemovalController
from herder.controllers.backups.requests import BackupRequests
from herder.controllers.backups.restore import EtcdRecovery
from herder.controllers.backups.retention import BackupRetentionController
from herder.controllers.backups.schedule import SNAPSHOT_TIMEOUT, EtcdBackupController
from herder.controllers.backups.stores import BackupStores
from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.admission import ClusterAdmission
from herder.controllers.clusters.bootstrap import BootstrapController
from herder.controllers.clusters.cluster_import import ClusterImportController, ImportSecrets
from herder.controllers.clusters.cluster_lock import ClusterLockController
from herder.controllers.clusters.cluster_machine_config import ClusterMachineConfigController
from herder.controllers.clusters.cluster_machine_readiness import ClusterMachineReadinessController
from herder.controllers.clusters.cluster_machine_teardown import ClusterMachineTeardownController
from herder.controllers.clusters.cluster_machines import ClusterMachineController
from herder.controllers.clusters.cluster_secrets import ClusterSecretsController
from herder.controllers.clusters.cluster_status import ClusterStatusController
from herder.controllers.clusters.cluster_teardown import ClusterTeardownController
from herder.controllers.clusters.config_apply import ConfigApplyController
from herder.controllers.clusters.config_history_retention import ConfigHistoryRetentionController
from herder.controllers.clusters.control_plane_status import ControlPlaneStatusController
from herder.controllers.clusters.credentials import ClusterCredentials, TalosGateway
from herder.controllers.clusters.joined_machines import JoinedMachineController
from herder.controllers.clusters.key_pool import KeyPool
from herder.controllers.clusters.load_balancer import EndpointRange, LoadBalancerController
from herder.controllers.clusters.machine_link import MachineLinkController
from herder.controllers.clusters.machine_registration import MachineRegistrationController
from herder.controllers.clusters.machine_set_allocation import MachineSetAllocationController
from herder.controllers.clusters.machine_set_status import MachineSetStatusController
from herder.controllers.clusters.secrets_rotation import SecretsRotationController
from herder.controllers.clusters.talos_upgrade import TalosUpgradeController
from herder.controllers.clusters.version_rollout import VersionRolloutController
from herder.controllers.kubernetes.health_checks import HealthCheckController
from herder.controllers.kubernetes.manifests import ClusterManifestController
from herder.controllers.kubernetes.pre_checks import UpgradePreChecksController
from herder.controllers.managed.admission import ManagedAdmission
from herder.controllers.managed.control_planes import ManagedControlPlaneController
from herder.controllers.managed.offerings import OfferingController
from herder.controllers.managed.replacement import ManagedReplacementController
from herder.controllers.observability.machine_logs import MachineLogController
from herder.controllers.observability.support_bundle import SupportBundles
from herder.controllers.provisioning.admission import ProvisioningAdmission
from herder.controllers.provisioning.infra_provider import InfraProviderController
from herder.controllers.provisioning.machine_request_set import MachineRequestSetController
from herder.controllers.provisioning.machine_requests import MachineRequestController
from herder.controllers.provisioning.machine_set_provisioning import MachineSetProvisioningController
from herder.controllers.provisioning.provider_config_patches import ProviderConfigPatchController
from herder.controllers.provisioning.release import ForceRelease
from herder.runtime.controller import Controller
from herder.runtime.event_collector import EventCollector
from herder.runtime.garbage_collector import GarbageCollector
from herder.state.machine_logs import MachineLogs
from herder.state.store import Store
from herder.talos.machine.pool import ClientPool, MachineDialer, dial
from herder.talos.siderolink.rejoin import KEY_PURPOSE as REJOIN_KEY_PURPOSE
from herder.talos.siderolink.rejoin import Rejoin


@dataclass(frozen=True)
class ControllerOptions:
    cluster_endpoints: EndpointRange | None = None
    # RSA keys kept ready for new clusters' secrets (see controllers.clusters.key_pool): made once a
    # cluster asked for one, or from the start when the operator asked for a number.
    spare_keys: int = 2
    spare_keys_now: bool = False
    # The folder of the backup store ``default`` (herder serve: DATA_DIR/backups).
    backups_dir: Path | None = None
    backup_policy: BackupPolicy = field(default_factory=managed_policy)
    """Managed clusters back up on the platform's schedule (``herder serve --managed-backups``)."""
    api_url: str = ""
    """herder's API as machines and providers reach it (in each provider's JoinConfig)."""
    siderolink_api: str = ""
    """SideroLink's Provision API as machines reach it (``grpc://HOST:PORT``), when herder serves it."""
    siderolink_server: str = ""
    """herder's address in the SideroLink tunnel (where machines send events and kernel logs)."""
    managed_control_planes: bool = False
    """Whether clusters may have managed control planes (``herder serve --managed-control-planes``)."""
    managed_replace_after: float = 300.0
    """How long a managed control plane stays unreachable before it is replaced."""
    dialer: MachineDialer = dial
    """What opens every Talos API client the controllers use (tests give fake machines)."""
    manifest_resync: float = 60.0
    """Seconds between syncs of a ClusterManifest (each reverts drift in the workload cluster)."""


def register_admission(store: Store, options: ControllerOptions | None = None) -> None:
    """Give the store the checks of herder's kinds (before it serves anything)."""
    ClusterAdmission(store).register(store.admission)
    RestoreAdmission(store).register(store.admission)
    ProvisioningAdmission(store).register(store.admission)
    enabled = options is not None and options.managed_control_planes
    ManagedAdmission(store, enabled=enabled).register(store.admission)


def cluster_credentials(store: Store, talos: TalosGateway | None = None) -> ClusterCredentials:
    """What makes the credentials users download for a cluster: its kubeconfig, and with herder's Talos API
    gateway its talosconfig."""
    return ClusterCredentials(ClusterKeys.shared(store), talos)


def backup_requests(store: Store) -> BackupRequests:
    """What takes the requests of ``herder cluster backup`` (a Cluster's object action)."""
    return BackupRequests(store)


def import_secrets(store: Store) -> ImportSecrets:
    """The Cluster's ``import`` action: an imported cluster's secrets bundle becomes its ClusterSecrets."""
    return ImportSecrets(store)


def support_bundles(store: Store, logs: MachineLogs | None) -> SupportBundles:
    """What makes a cluster's support bundle (the Cluster's ``support`` action)."""
    return SupportBundles(store, ClusterKeys.shared(store), logs)


def machine_request_release(store: Store) -> ForceRelease:
    """The force release of MachineRequests (an Admin's action)."""
    return ForceRelease(store)


def _rejoin(store: Store, options: ControllerOptions) -> Rejoin | None:
    """How machines that joined with a JoinToken join again, where herder serves SideroLink."""
    if not options.siderolink_api or not options.siderolink_server:
        return None
    key = store.derived_key(REJOIN_KEY_PURPOSE)
    return Rejoin(key, options.siderolink_api, options.siderolink_server) if key is not None else None


def controllers(store: Store, options: ControllerOptions) -> list[Controller]:
    keys = ClusterKeys.shared(store)
    stores = BackupStores(store, options.backups_dir)
    balancer = LoadBalancerController(options.cluster_endpoints)

    def clients(keep: int, timeout: float, **more: Any) -> ClientPool:
        return ClientPool(dialer=options.dialer, keep=keep, timeout=timeout, **more)

    return [
        GarbageCollector(store.registry),
        EventCollector(),
        # Each endpoint is asked once, quickly: a machine that does not answer is asked again later.
        MachineRegistrationController(clients(0, 10, connect_timeout=5, retries=0)),
        JoinedMachineController(),
        MachineLinkController(keys, clients=clients(0, 10)),
        ClusterSecretsController(KeyPool(options.spare_keys), make_keys_now=options.spare_keys_now),
        ClusterTeardownController(),
        ClusterLockController(),
        ClusterImportController(),
        balancer,
        MachineSetAllocationController(),
        MachineSetStatusController(),
        ClusterMachineController(),
        ClusterMachineConfigController(keys, _rejoin(store, options)),
        ConfigApplyController(keys, clients(32, 30)),
        ConfigHistoryRetentionController(),
        ClusterMachineReadinessController(),
        BootstrapController(keys, EtcdRecovery(stores), clients(8, 30)),
        ControlPlaneStatusController(keys, balancer.health, dialer=options.dialer),
        ClusterStatusController(),
        ClusterMachineTeardownController(keys, clients(8, 30)),
        VersionRolloutController(),
        TalosUpgradeController(keys, clients=clients(8, 60)),
        SecretsRotationController(keys, clients(8, 15)),
        EtcdBackupController(keys, stores, options.backup_policy, clients(8, SNAPSHOT_TIMEOUT)),
        BackupRetentionController(options.backup_policy),
        EtcdBackupRemovalController(stores),
        BackupKeyCleanupController(),
        # What herder keeps in the workload clusters' Kubernetes.
        ClusterManifestController(keys, options.manifest_resync),
        HealthCheckController(keys),
        UpgradePreChecksController(keys),
        # Provisioning: providers, request sets, requests, auto-provisioned machine sets, provider patches.
        InfraProviderController(options.api_url, options.siderolink_api, options.siderolink_server),
        MachineRequestSetController(),
        MachineRequestController(),
        MachineSetProvisioningController(),
        ProviderConfigPatchController(),
        # Managed control planes: the offerings users see, and each managed cluster's control planes.
        OfferingController(),
        ManagedControlPlaneController(),
        ManagedReplacementController(options.managed_replace_after),
        # Access: a disabled person's credentials go.
        DisabledUserController(),
    ]


def replica_controllers(store: Store, options: ControllerOptions, logs: MachineLogs) -> list[Controller]:
    """The controllers every replica runs, leader or not (``herder.runtime.replica``): they write nothing
    to the store, only to the replica's own data directory — the machine logs it follows."""
    return [
        MachineLogController(
            logs, ClusterKeys.shared(store), clients=ClientPool(dialer=options.dialer, keep=0)
        )
    ]


def listed_controllers(store: Store, options: ControllerOptions) -> list[Controller]:
    """Every controller herder runs, the leader's and each replica's, to be listed (``herder debug
    controllers``, docs/controllers.md): the replicas' are given no logs folder they would write to."""
    return [*controllers(store, options), *replica_controllers(store, options, MachineLogs(Path("/")))]
