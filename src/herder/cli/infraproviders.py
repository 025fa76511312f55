"""``herder infraprovider`` (register a provider with its service account; run one) and ``herder
machinerequest release NAME --force``; and a provider run inside the server (``herder serve --provider
ID``), over loopback with its own service account, exactly as it would run outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from herder.api.datadir import write_kubeconfig
from herder.cli.common import (
    KubeconfigOption,
    ProviderKubeconfigOption,
    connect,
    err,
    kubeconfig_path,
    out,
    run,
)
from herder.cli.errors import fail
from herder.client import Client, Credentials
from herder.client.kubeconfig import load
from herder.resources import Resource
from herder.resources.access import RESERVED_PREFIX, SERVICE_ACCOUNT, TOKEN, TOKEN_SUBJECT_LABEL
from herder.resources.provisioning import INFRA_PROVIDER, MACHINE_REQUEST
from herder.state.errors import AlreadyExists
from herder.state.errors import NotFound as StateNotFound
from herder.state.store import SYSTEM, Store

app = typer.Typer(help="Infra providers: register them, run them.", no_args_is_help=True)
requests_app = typer.Typer(help="Machine requests: let go of stuck ones.", no_args_is_help=True)

log = logging.getLogger("herder.infra")


def account_name(provider_id: str) -> str:
    """The ServiceAccount a provider runs as."""
    return f"infraprovider-{provider_id}"


def _account(provider: Resource) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": SERVICE_ACCOUNT.api_version,
            "kind": SERVICE_ACCOUNT.kind,
            "metadata": {
                "name": account_name(provider.name),
                # It goes with its provider.
                "ownerReferences": [
                    {
                        "apiVersion": INFRA_PROVIDER.api_version,
                        "kind": INFRA_PROVIDER.kind,
                        "name": provider.name,
                        "uid": provider.metadata.uid,
                    }
                ],
            },
            "spec": {
                "role": "InfraProvider",
                "providerId": provider.name,
                "description": f"infra provider {provider.name}",
            },
        }
    )


def _provider(provider_id: str, hidden: bool, display_name: str, description: str, config: Any) -> Resource:
    spec: dict[str, Any] = {"displayName": display_name, "description": description, "hidden": hidden}
    if config is not None:
        spec["config"] = config
    return Resource.model_validate(
        {
            "apiVersion": INFRA_PROVIDER.api_version,
            "kind": INFRA_PROVIDER.kind,
            "metadata": {"name": provider_id},
            "spec": spec,
        }
    )


def _read_config(path: Path | None) -> Any:
    if path is None:
        return None
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise fail(f"cannot read --config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise fail(f"--config {path} must hold an object")
    return data


@app.command()
def create(
    provider_id: Annotated[str, typer.Argument(metavar="ID", help="The provider's id (a DNS label).")],
    hidden: Annotated[
        bool, typer.Option("--hidden", help="Invisible to cluster users (the id must begin herder-).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Also write the provider's kubeconfig (mode 0600).")
    ] = None,
    display_name: Annotated[str, typer.Option("--display-name")] = "",
    description: Annotated[str, typer.Option("--description")] = "",
    config: Annotated[
        Path | None, typer.Option("--config", help="The provider's config (YAML): spec.config, sealed.")
    ] = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Register an infra provider (Admin; Support for hidden ones) with a ServiceAccount of role
    InfraProvider scoped to its id, and print that account's token on stdout, this once only."""
    if hidden and not provider_id.startswith(RESERVED_PREFIX):
        raise fail(f"a hidden provider's id must begin with {RESERVED_PREFIX!r} (and only Support makes it)")
    settings = _read_config(config)

    async def work() -> str:
        async with connect(kubeconfig) as client:
            provider = await client.create(
                _provider(provider_id, hidden, display_name, description, settings)
            )
            await client.create(_account(provider))
            return (await client.issue_token(SERVICE_ACCOUNT, account_name(provider_id))).token

    token = run(work)
    err.print(
        f"infraprovider/{provider_id} created with serviceaccount/{account_name(provider_id)}; "
        "its token follows, shown this once only",
        markup=False,
    )
    out.print(token, markup=False)
    if output is not None:
        credentials = load(kubeconfig_path(kubeconfig))
        try:
            write_kubeconfig(
                output, credentials.server, credentials.ca_pem, token, user=account_name(provider_id)
            )
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror}") from None
        err.print(f"kubeconfig written to {output}", markup=False)


def run_options(
    concurrency: int, heartbeat: float, resync: float, config: Path | None, **settings: Any
) -> Any:
    from herder.infra import RunOptions

    return RunOptions(
        concurrency=concurrency,
        heartbeat_interval=heartbeat,
        resync_interval=resync,
        config_file=config,
        config={k: v for k, v in settings.items() if v is not None} or None,
    )


def run_until_signalled(provider_type: str, provider_id: str, kubeconfig: Path | None, options: Any) -> None:
    """Run a provider in this process until SIGTERM or SIGINT (exit 0)."""
    from herder.infra import ConfigError, UnknownProvider, load_provider, run_provider

    path = kubeconfig_path(kubeconfig, admin_default=False)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request drowns what matters
    try:
        provider = load_provider(provider_type)()
    except UnknownProvider as exc:
        raise fail(str(exc)) from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Client.from_kubeconfig(path) as client:
            await run_provider(provider, client, provider_id, options, stop)

    try:
        run(main)
    except ConfigError as exc:
        raise fail(str(exc)) from None


@app.command("run")
def run_command(
    provider_id: Annotated[str, typer.Argument(metavar="ID", help="The provider's id.")],
    kubeconfig: ProviderKubeconfigOption = None,
    provider_type: Annotated[
        str | None,
        typer.Option("--type", help="The provider (an entry point of herder.providers; default: the id)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Config file, when herder holds none for it.")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 8,
    heartbeat: Annotated[float, typer.Option("--heartbeat", help="Seconds between heartbeats.")] = 10.0,
    resync: Annotated[float, typer.Option("--resync", help="Seconds between checks of machines.")] = 30.0,
) -> None:
    """Run an infra provider out of the server, as ID, until SIGTERM or SIGINT."""
    run_until_signalled(
        provider_type or provider_id,
        provider_id,
        kubeconfig,
        run_options(concurrency, heartbeat, resync, config),
    )


@requests_app.command()
def release(
    name: Annotated[str, typer.Argument(help="The MachineRequest.")],
    force: Annotated[
        bool, typer.Option("--force", help="Let it go without its provider (which is gone for good).")
    ] = False,
    namespace: Annotated[str, typer.Option("--namespace", "-n")] = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Let go of a machine request whose provider will never destroy its machine (Admin; audited): it
    is deleted, its provider's finalizer dropped, its machine released from its cluster without a reset."""
    if not force:
        raise fail(
            "a machine request is released by deleting it (kubectl delete machinerequest NAME); --force "
            "lets go of one whose provider is gone, without the machine being destroyed"
        )

    async def work() -> bytes:
        async with connect(kubeconfig) as client:
            return await client.run_action(MACHINE_REQUEST, name, "release", {"force": True}, namespace)

    out.print(run(work).decode().strip(), markup=False)


class InServerProvider:
    """A provider run by ``herder serve --provider ID[=TYPE]``: over loopback, as its own ServiceAccount
    (made if missing, with a fresh token each start and the previous ones revoked), with the same SDK and
    the same access limits as outside the server. The InfraProvider must be registered (its config is
    there)."""

    def __init__(self, store: Store, admin_kubeconfig: Path, provider_id: str, provider_type: str) -> None:
        self._store = store
        self._admin = admin_kubeconfig
        self._id = provider_id
        self._type = provider_type
        self._stop = asyncio.Event()

    async def run(self) -> None:
        from herder.api import tokens
        from herder.infra import RunOptions, load_provider, run_provider

        provider_class = load_provider(self._type)
        told = False
        while not self._stop.is_set():
            try:
                provider = await self._store.get(INFRA_PROVIDER, self._id)
                break
            except StateNotFound:
                if not told:
                    log.warning(
                        "herder serve --provider %s: waiting for it to be registered "
                        "(herder infraprovider create %s)",
                        self._id,
                        self._id,
                    )
                    told = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 2)
        else:
            return
        with contextlib.suppress(AlreadyExists):
            await self._store.create(_account(provider), actor=SYSTEM)
        name = account_name(self._id)
        old = await self._store.list(TOKEN, label_selector=f"{TOKEN_SUBJECT_LABEL}={name}")
        for token in old.items:
            with contextlib.suppress(StateNotFound):
                await self._store.delete(TOKEN, token.name, actor=SYSTEM)
        issued = await tokens.issue(self._store, SERVICE_ACCOUNT, name, description="herder serve --provider")
        admin = load(self._admin)
        client = Client(Credentials(admin.server, issued.token, admin.ca_pem))
        async with client:
            await run_provider(provider_class(), client, self._id, RunOptions(), self._stop)

    def stop(self) -> None:
        self._stop.set()


def parse_provider_flag(flag: str) -> tuple[str, str]:
    """``ID`` or ``ID=TYPE`` of ``herder serve --provider``."""
    provider_id, _, provider_type = flag.partition("=")
    if not provider_id:
        raise fail(f"--provider {flag!r}: expected ID or ID=TYPE")
    return provider_id, provider_type or provider_id
