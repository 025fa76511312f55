"""``herder login``, ``herder logout`` and ``herder auth exec-credential``: people signing in from the
command line through herder's identity provider (see ``herder.client.sign_in``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from herder.cli.errors import fail
from herder.client.config_home import login_kubeconfig
from herder.client.kubeconfig import KubeconfigError, cluster_of

auth_app = typer.Typer(help="Credentials for kubectl and other Kubernetes clients.", no_args_is_help=True)

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="herder's URL (default: the server of --kubeconfig, when it exists).",
        show_default=False,
    ),
]
LoginKubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="The kubeconfig to write, for herder's API with the exec plugin (default: $HERDER_KUBECONFIG, "
        "else ~/.config/herder/kubeconfig, which herder's commands then use).",
        show_default=False,
    ),
]


def _kubeconfig(given: Path | None) -> Path:
    if given is not None:
        return given
    env = os.environ.get("HERDER_KUBECONFIG")
    return Path(env) if env else login_kubeconfig()


def _server(given: str | None, kubeconfig: Path) -> tuple[str, bytes | None]:
    """The server to sign in to, and the CA its kubeconfig trusts (if it has one)."""
    if given:
        return given.rstrip("/"), None
    if kubeconfig.exists():
        try:
            server, ca = cluster_of(kubeconfig)
        except KubeconfigError as exc:
            raise fail(str(exc)) from None
        if server:
            return server, ca
    raise fail(f"--server: which herder to sign in to (there is no kubeconfig at {kubeconfig} naming one)")


def _herder_command() -> str:
    """This herder's path, for kubeconfigs to run it by (kubectl may run with another PATH)."""
    mine = Path(sys.argv[0])
    if mine.name == "herder" and mine.exists():
        return str(mine.absolute())
    return shutil.which("herder") or "herder"


def _say(text: str) -> None:
    print(text, flush=True)


def login(
    server: ServerOption = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            "--ca-file", help="The CA (PEM) of herder's serving certificate (default: the system's)."
        ),
    ] = None,
    device: Annotated[
        bool,
        typer.Option(
            "--device",
            help="Sign in with a code on another device (the device grant), not this one's browser.",
        ),
    ] = False,
    kubeconfig: LoginKubeconfigOption = None,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Only print the sign-in URL; open no browser.")
    ] = False,
) -> None:
    """Sign in to herder through its identity provider and write a kubeconfig that keeps you signed in
    (kubectl runs herder auth exec-credential: no token is written into the kubeconfig)."""
    from herder.client.sign_in import SignInError, sign_in, write_kubeconfig

    path = _kubeconfig(kubeconfig)
    url, known_ca = _server(server, path)
    try:
        ca = ca_file.read_text() if ca_file is not None else (known_ca.decode() if known_ca else None)
    except OSError as exc:
        raise fail(f"--ca-file {ca_file}: {exc.strerror or exc}") from None
    try:
        signed = sign_in(url, ca, _say, device=device, open_browser=not no_browser)
    except SignInError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    write_kubeconfig(path, url, ca, _herder_command())
    _say(f"Signed in to {url} as {signed.user} (role {signed.role}).")
    _say(f"Kubeconfig: {path}  (kubectl --kubeconfig {path} get clusters)")


def logout(server: ServerOption = None, kubeconfig: LoginKubeconfigOption = None) -> None:
    """Sign out: revoke herder's token and the identity provider's refresh token, and forget them."""
    from herder.client.sign_in import SignInError, sign_out

    url, _ = _server(server, _kubeconfig(kubeconfig))
    try:
        login = sign_out(url)
    except SignInError as exc:
        raise fail(str(exc)) from None
    _say(f"Signed out of {url}." if login is not None else f"Not signed in to {url}.")


@auth_app.command("exec-credential")
def exec_credential(
    server: Annotated[str, typer.Option("--server", help="herder's URL, as herder login signed in to it.")],
) -> None:
    """Print a client.authentication.k8s.io/v1 ExecCredential with a herder token for --server (kubectl's
    exec credential plugin; kubeconfigs written by herder login run it)."""
    from herder.client.sign_in import SignInError
    from herder.client.sign_in import exec_credential as credential

    try:
        answer = credential(server.rstrip("/"))
    except SignInError as exc:
        raise fail(str(exc)) from None
    print(json.dumps(answer))
