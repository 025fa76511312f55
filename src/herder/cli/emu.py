"""``herder emu``: run the Talos emulator, and drive it (machines, clusters, power, faults) through its control
API."""

from __future__ import annotations

import asyncio
import json
import logging
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer
import yaml

from herder.cli.common import ProviderKubeconfigOption
from herder.cli.errors import fail
from herder.cli.ports import check_free
from herder.cli.text import columns
from herder.emu.options import (
    CLOUD_OPERATIONS,
    DEFAULT_MACHINE_CIDR,
    DEFAULT_MACHINE_PORT,
    DEFAULT_TALOS_VERSION,
    FAULTS,
    BmcOptions,
    EmulatorOptions,
)
from herder.emu.timings import Timings

if TYPE_CHECKING:
    from herder.emu.control.emulator import Emulator

app = typer.Typer(
    help="The Talos emulator: many emulated Talos machines in one process.", no_args_is_help=True
)

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="The emulator's data directory (to find its control API).", show_default=False
    ),
]
UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="The emulator's control API URL (instead of --data-dir).", show_default=False),
]


def _split_listen(listen: str, option: str = "--listen") -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise fail(f"invalid {option} {listen!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _timings(preset: str, overrides: list[str]) -> Timings:
    values: dict[str, float] = {}
    for item in overrides:
        name, _, seconds = item.partition("=")
        try:
            values[name.strip()] = float(seconds)
        except ValueError:
            raise fail(f"invalid --timing {item!r}: expected STEP=SECONDS") from None
    try:
        return Timings.named(preset).with_overrides(values)
    except ValueError as e:
        raise fail(str(e)) from None


@app.command("run")
def run(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where machines and clusters are persisted.")],
    machines: Annotated[int, typer.Option("--machines", help="Machines to have (persisted ones count).")] = 1,
    listen: Annotated[str, typer.Option("--listen", help="Control API address.")] = "127.0.0.1:50080",
    machine_cidr: Annotated[
        str, typer.Option("--machine-cidr", help="Loopback network machines get their addresses from.")
    ] = DEFAULT_MACHINE_CIDR,
    machine_port: Annotated[int, typer.Option("--machine-port", help="Port of every machine's apid.")] = (
        DEFAULT_MACHINE_PORT
    ),
    talos_version: Annotated[str, typer.Option("--talos-version", help="Talos version of new machines.")] = (
        DEFAULT_TALOS_VERSION
    ),
    timings: Annotated[
        str, typer.Option("--timings", help="fast (default) or realistic stage durations.")
    ] = "fast",
    timing: Annotated[
        list[str] | None, typer.Option("--timing", help="Override one step: STEP=SECONDS (boot, install, …).")
    ] = None,
    register: Annotated[
        Path | None,
        typer.Option(
            "--register",
            help="Kubeconfig of a herder server (an Admin's): register the machines started here with it.",
            show_default=False,
        ),
    ] = None,
    bmc: Annotated[
        bool,
        typer.Option(
            "--bmc",
            help="Bare metal: the machines made at start are powered off with no OS, each with a BMC in one "
            "Redfish service (HTTPS; its CA in DATA_DIR/bmc/ca.pem).",
        ),
    ] = False,
    bmc_listen: Annotated[
        str | None,
        typer.Option(
            "--bmc-listen",
            help="The Redfish service's address (default: --listen's host, a port the system picks).",
            show_default=False,
        ),
    ] = None,
    join: Annotated[
        str | None,
        typer.Option(
            "--join",
            help="Kernel arguments (a JoinConfig's kernelArgs, siderolink.api=grpc://HOST:PORT?jointoken=… "
            "at least): every machine joins herder over SideroLink at each boot, in a network namespace of "
            "its own behind this one's, serving its Talos API on its tunnel address only. Needs root and "
            "wireguard-go; changes the namespace the emulator runs in (run it in one of its own). "
            "siderolink.api=https://... is checked against the system's roots, as Talos does "
            "(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names others).",
            show_default=False,
        ),
    ] = None,
    bmc_user: Annotated[str, typer.Option("--bmc-user", help="The BMCs' user name.")] = "admin",
    bmc_password: Annotated[
        str, typer.Option("--bmc-password", help="The BMCs' password.", show_default=False)
    ] = "password",
) -> None:
    """Run N emulated Talos machines until SIGTERM or SIGINT; writes DATA_DIR/machines.json."""
    host, port = _split_listen(listen)
    if machines < 0:
        raise fail("--machines must not be negative")
    if (bmc_listen is not None or bmc_user != "admin" or bmc_password != "password") and not bmc:
        raise fail("--bmc-listen, --bmc-user and --bmc-password go with --bmc")
    bmcs = None
    if bmc:
        bmc_host, bmc_port = _split_listen(bmc_listen, "--bmc-listen") if bmc_listen else (host, 0)
        if not bmc_user or not bmc_password:
            raise fail("--bmc-user and --bmc-password must not be empty")
        bmcs = BmcOptions(host=bmc_host, port=bmc_port, username=bmc_user, password=bmc_password)
    if join is not None:
        from herder.talos.siderolink.kernel_args import JoinArgsError, parse

        try:
            parse(join)
        except JoinArgsError as exc:
            raise fail(f"--join: {exc}") from None
    options = EmulatorOptions(
        data_dir=data_dir,
        machines=machines,
        machine_cidr=machine_cidr,
        machine_port=machine_port,
        talos_version=talos_version,
        timings=_timings(timings, timing or []),
        bmc=bmcs,
        join=join or "",
    )
    if register is not None and not register.is_file():
        raise fail(f"--register {register}: no such kubeconfig")
    check_free(listen, "the emulator's control API", "--listen")
    # The emulator itself (grpc, the emulated Kubernetes API) loads only for the command that runs it.
    from herder.emu.control.registration import register_machines
    from herder.emu.control.run import serve

    async def ready(emulator: Emulator) -> None:
        if register is not None:
            await register_machines(emulator, register)

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        asyncio.run(serve(options, host, port, ready=ready))
    except (OSError, ValueError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None  # Ctrl+C before the emulator took over the signals


def _base_url(url: str | None, data_dir: Path | None) -> str:
    if url:
        return url.rstrip("/")
    if data_dir is None:
        raise fail("give the emulator's --url or its --data-dir")
    from herder.emu.control.store import read_info

    try:
        return str(read_info(data_dir)["control"])
    except (OSError, KeyError, ValueError) as e:
        raise fail(f"no running emulator found in {data_dir}: {e}") from None


def _request(method: str, url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    try:
        response = httpx.request(method, url + path, json=body, timeout=30)
    except httpx.HTTPError as e:
        raise fail(f"cannot reach the emulator at {url}: {e}") from None
    data = response.json()
    if response.status_code >= 400:
        raise fail(str(data.get("error") if isinstance(data, dict) else data))
    return data


MACHINE_COLUMNS = ("UUID", "ENDPOINT", "HOSTNAME", "STAGE", "POWER", "VERSION", "FAULTS")


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


@app.command("machines")
def list_machines(
    url: UrlOption = None,
    data_dir: DataDirOption = None,
    output: Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")] = Format.table,
) -> None:
    """List the emulated machines, one per line under a header: UUID, ENDPOINT (where its Talos API
    answers), HOSTNAME, STAGE, POWER (on or off), VERSION (of Talos) and FAULTS (injected, or -). With -o
    json or yaml, everything the control API shows of each (also node, ready, installed, machine_type,
    cluster_id, last_error, hardware, and boots, bootID and configApplies: how many times its system booted,
    the current boot's ID, and how many configs it took), for scripts."""
    machines = _request("GET", _base_url(url, data_dir), "/machines")
    if output is Format.json:
        typer.echo(json.dumps(machines, indent=2))
        return
    if output is Format.yaml:
        typer.echo(yaml.safe_dump(machines, sort_keys=False), nl=False)
        return
    rows = [
        (
            m["uuid"],
            m["endpoint"],
            m["hostname"],
            m["stage"],
            m["power"],
            m["talos_version"],
            ",".join(m["faults"]) or "-",
        )
        for m in machines
    ]
    typer.echo(columns(rows, MACHINE_COLUMNS))


@app.command("clusters")
def list_clusters(url: UrlOption = None, data_dir: DataDirOption = None) -> None:
    """List the emulated clusters: name, etcd quorum and healthy members, leader, and where the Kubernetes
    API is served (each control plane's address, port 6443; "(down)" where it does not serve now)."""
    for c in _request("GET", _base_url(url, data_dir), "/clusters"):
        healthy = sum(1 for m in c["members"] if m["healthy"])
        etcd = f"{healthy}/{len(c['members'])} healthy" + ("" if c["quorum"] else ", no quorum")
        apis = [a["url"] + ("" if a["serving"] else " (down)") for a in c["kubernetes"]]
        typer.echo(
            f"{c['name'] or c['id']}\tetcd {etcd}\tleader {c['leader'] or '-'}\t{', '.join(apis) or '-'}"
        )


@app.command("fault")
def fault(
    machine: Annotated[str, typer.Argument(help="Machine uuid, address or hostname.", show_default=False)],
    kind: Annotated[str, typer.Argument(help=" | ".join(FAULTS), show_default=False)],
    url: UrlOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Inject a fault into a machine (heal clears them; vanish destroys it, as a cloud would behind
    herder's back)."""
    if kind not in FAULTS:
        raise fail(f"unknown fault {kind!r}: expected one of {', '.join(FAULTS)}")
    result = _request("POST", _base_url(url, data_dir), f"/machines/{machine}/fault", {"fault": kind})
    typer.echo(json.dumps({"uuid": result["uuid"], "stage": result["stage"], "faults": result["faults"]}))


@app.command("power")
def power(
    machine: Annotated[str, typer.Argument(help="Machine uuid, address or hostname.", show_default=False)],
    state: Annotated[str, typer.Argument(help="on | off", show_default=False)],
    url: UrlOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Power a machine on or off, as its BMC would."""
    if state not in ("on", "off"):
        raise fail("state must be on or off")
    result = _request("POST", _base_url(url, data_dir), f"/machines/{machine}/power", {"state": state})
    typer.echo(json.dumps({"uuid": result["uuid"], "power": result["power"], "stage": result["stage"]}))


@app.command("log")
def log_line(
    machine: Annotated[str, typer.Argument(help="Machine uuid, address or hostname.", show_default=False)],
    service: Annotated[
        str, typer.Argument(help="The service that prints it (kubelet, etcd…).", show_default=False)
    ],
    line: Annotated[str, typer.Argument(help="What it prints.", show_default=False)],
    url: UrlOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Make a service of a machine print a line in its log, as the service writes its lines (a
    misbehaving program printing a secret, to see herder keep it redacted)."""
    path = f"/machines/{machine}/logs"
    _request("POST", _base_url(url, data_dir), path, {"service": service, "line": line})


@app.command("cloud-fault")
def cloud_fault(
    operation: Annotated[
        str | None, typer.Argument(help=" | ".join(CLOUD_OPERATIONS), show_default=False)
    ] = None,
    times: Annotated[int, typer.Option("--times", min=0, help="Calls to fail (0: until cleared).")] = 1,
    clear: Annotated[bool, typer.Option("--clear", help="Clear every cloud fault.")] = False,
    url: UrlOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Make what a provider asks of the emulator fail, as a cloud's API does: the next TIMES calls that
    create, destroy or power machines answer an error (a provisioning step fails on it)."""
    base = _base_url(url, data_dir)
    if clear:
        typer.echo(json.dumps(_request("DELETE", base, "/faults")))
        return
    if operation not in CLOUD_OPERATIONS:
        raise fail(f"unknown operation {operation!r}: expected one of {', '.join(CLOUD_OPERATIONS)}")
    typer.echo(json.dumps(_request("POST", base, "/faults", {"operation": operation, "times": times})))


@app.command("provider")
def provider(
    provider_id: Annotated[str, typer.Option("--id", help="The infra provider's id.")],
    kubeconfig: ProviderKubeconfigOption = None,
    emulator: Annotated[
        str | None,
        typer.Option("--emulator", help="The emulator's control API URL (default: from herder's config)."),
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 8,
    heartbeat: Annotated[float, typer.Option("--heartbeat", help="Seconds between heartbeats.")] = 10.0,
    resync: Annotated[float, typer.Option("--resync", help="Seconds between checks of machines.")] = 30.0,
) -> None:
    """Run the emulator's infra provider: an emulated machine per MachineRequest of provider ID, made in
    the emulator at --emulator, until SIGTERM or SIGINT."""
    from herder.cli.infraproviders import run_options, run_until_signalled

    options = run_options(concurrency, heartbeat, resync, None, emulator=emulator)
    run_until_signalled("emulator", provider_id, kubeconfig, options)
