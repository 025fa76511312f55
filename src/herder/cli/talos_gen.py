"""``herder talos gen``: secrets bundles and machine configs, with the flags and meaning of ``talosctl gen``.

Every failure the user can cause (an unknown Talos version, a bad Kubernetes version or endpoint, a malformed
patch, an invalid secrets file, an unwritable output) ends with one line on stderr and exit code 1.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from herder.cli.errors import UsageFailure, one_line_errors
from herder.cli.files import STDOUT, patch_texts, write_private
from herder.talos.contracts import LATEST, UnknownTalosVersion, VersionContract
from herder.talos.generate import ConfigInput, GenerateError, generate_bundle
from herder.talos.patches import PatchError
from herder.talos.pki import PKIError
from herder.talos.secrets import InvalidSecrets, dump_secrets, generate_secrets, load_secrets_file
from herder.talos.talosconfig import TalosconfigError, dump_talosconfig

# The errors of the Talos library a user's input can cause.
TALOS_FAILURES = (
    UnknownTalosVersion,
    GenerateError,
    InvalidSecrets,
    PatchError,
    PKIError,
    TalosconfigError,
    OSError,
)
_RELEASE = re.compile(r"^v?(\d+\.\d+)(\.\d+.*)?$")


def _check_writable(paths: Sequence[Path], force: bool) -> None:
    """Refuse to clobber files (as talosctl does without ``--force``) before anything is written."""
    if force:
        return
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        raise UsageFailure(f"file {', '.join(existing)} already exists, use --force to overwrite")


def _write(path: Path, text: str) -> None:
    write_private(path, text)
    typer.echo(f"Created {path}", err=True)


def _split(values: Sequence[str]) -> list[str]:
    """Comma-separated and repeated values of a list flag, as cobra's string slices."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _registry_mirrors(specs: Sequence[str]) -> dict[str, list[str]]:
    mirrors: dict[str, list[str]] = {}
    for spec in _split(specs):
        host, sep, url = spec.partition("=")
        if not sep or not host or not url:
            raise UsageFailure(
                f"invalid registry mirror spec {spec!r}: expected <registry host>=<mirror URL>"
            )
        mirrors.setdefault(host, []).append(url)
    return mirrors


def default_install_image(talos_version: str) -> str:
    """The installer of the requested Talos release (``X.Y`` means ``X.Y.0``)."""
    m = _RELEASE.match(talos_version.strip())
    tag = f"v{m.group(1)}{m.group(2) or '.0'}" if m else f"v{LATEST}.0"
    return f"ghcr.io/siderolabs/installer:{tag}"


def gen_secrets(
    output_file: Annotated[
        str, typer.Option("--output-file", "-o", help='Path of the output file, or "-" for stdout.')
    ] = "secrets.yaml",
    talos_version: Annotated[
        str, typer.Option(help="The Talos version the bundle is for (X.Y or vX.Y.Z); selects its contract.")
    ] = str(LATEST),
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite an existing file.")] = False,
) -> None:
    """Generate a secrets bundle (talosctl's format) to generate configs from later."""
    with one_line_errors(*TALOS_FAILURES):
        bundle = generate_secrets(VersionContract.parse(talos_version))
        if output_file == STDOUT:
            sys.stdout.write(dump_secrets(bundle))
            return
        target = Path(output_file)
        _check_writable([target], force)
        _write(target, dump_secrets(bundle))


def gen_config(
    cluster_name: Annotated[str, typer.Argument(help="The cluster name.")],
    cluster_endpoint: Annotated[
        str, typer.Argument(help="The Kubernetes API endpoint, e.g. https://10.0.0.1:6443.")
    ],
    talos_version: Annotated[
        str,
        typer.Option(help="The Talos version to generate for (X.Y or vX.Y.Z); selects the config contract."),
    ],
    kubernetes_version: Annotated[str, typer.Option(help="The Kubernetes version to run, e.g. 1.32.4.")],
    with_secrets: Annotated[
        Path | None, typer.Option(help="Use a secrets bundle from 'gen secrets' instead of new secrets.")
    ] = None,
    additional_sans: Annotated[
        list[str], typer.Option(help="Additional Subject-Alt-Names for the API server certificate (A,B).")
    ] = [],  # noqa: B006 - typer reads list defaults, it does not mutate them
    dns_domain: Annotated[str, typer.Option(help="The cluster's DNS domain.")] = "cluster.local",
    install_disk: Annotated[str, typer.Option(help="The disk to install to.")] = "/dev/sda",
    install_image: Annotated[
        str | None,
        typer.Option(help="The installer image; by default the installer of the --talos-version release."),
    ] = None,
    registry_mirror: Annotated[
        list[str], typer.Option(help="A registry mirror, <registry host>=<mirror URL>; repeatable.")
    ] = [],  # noqa: B006
    with_kubespan: Annotated[bool, typer.Option("--with-kubespan", help="Enable KubeSpan.")] = False,
    with_cluster_discovery: Annotated[
        bool, typer.Option("--with-cluster-discovery/--without-cluster-discovery", help="Cluster discovery.")
    ] = True,
    config_patch: Annotated[
        list[str], typer.Option(help="Patch both configs; inline YAML/JSON or @FILE; repeatable.")
    ] = [],  # noqa: B006
    config_patch_control_plane: Annotated[
        list[str], typer.Option(help="Patch the control plane config; inline or @FILE; repeatable.")
    ] = [],  # noqa: B006
    config_patch_worker: Annotated[
        list[str], typer.Option(help="Patch the worker config; inline or @FILE; repeatable.")
    ] = [],  # noqa: B006
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="The directory for controlplane.yaml, worker.yaml, talosconfig."),
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite existing files.")] = False,
) -> None:
    """Generate controlplane.yaml, worker.yaml and talosconfig for a cluster."""
    with one_line_errors(*TALOS_FAILURES):
        contract = VersionContract.parse(talos_version)
        secrets = load_secrets_file(with_secrets) if with_secrets else generate_secrets(contract)
        inp = ConfigInput(
            cluster_name=cluster_name,
            endpoint=cluster_endpoint,
            kubernetes_version=kubernetes_version,
            contract=contract,
            secrets=secrets,
            additional_sans=_split(additional_sans),
            dns_domain=dns_domain,
            install_disk=install_disk,
            install_image=install_image
            if install_image is not None
            else default_install_image(talos_version),
            registry_mirrors=_registry_mirrors(registry_mirror),
            kubespan=True if with_kubespan else None,
            discovery=with_cluster_discovery,
        )
        bundle = generate_bundle(
            inp,
            patches=patch_texts(config_patch, "--config-patch"),
            control_plane_patches=patch_texts(config_patch_control_plane, "--config-patch-control-plane"),
            worker_patches=patch_texts(config_patch_worker, "--config-patch-worker"),
        )
        files = {
            output / "controlplane.yaml": bundle.controlplane,
            output / "worker.yaml": bundle.worker,
            output / "talosconfig": dump_talosconfig(bundle.talosconfig),
        }
        _check_writable(list(files), force)
        for path, text in files.items():
            _write(path, text)


def register(app: typer.Typer) -> None:
    """Add the ``gen`` group to the ``herder talos`` application."""
    gen = typer.Typer(
        help="Generate Talos secrets bundles and machine configs, as talosctl gen.", no_args_is_help=True
    )
    gen.command("secrets")(gen_secrets)
    gen.command("config")(gen_config)
    app.add_typer(gen, name="gen")
