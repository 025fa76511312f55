"""The ``herder`` entry point: one typer application with a sub-command group per area.

Each area is registered lazily (``herder.cli.lazy``): a command line loads only the module of the area it
names, and ``herder --help`` none, since the areas together import most of herder (the server, the
emulator, templates, the Talos library), which would make every short command pay for all of them.
"""

from __future__ import annotations

import typer

from herder.cli.lazy import Lazy, lazy_group

COMMANDS: dict[str, Lazy] = {
    "talos": Lazy("herder.cli.talos", "app", "Talos configs and the Talos machine API."),
    "serve": Lazy(
        "herder.cli.serve",
        "serve_command",
        "Run herder's API server (HTTPS) and its Talos API gateway; on first start it writes "
        "DATA_DIR/admin.kubeconfig.",
    ),
    "demo": Lazy(
        "herder.cli.serve",
        "demo",
        "Run herder with demo objects in ./.herder-demo, the Talos emulator beside it with a demo cluster, "
        "and print how to use kubectl against both.",
    ),
    "get": Lazy("herder.cli.objects", "get", "List objects of a kind, or show one."),
    "apply": Lazy(
        "herder.cli.objects",
        "apply",
        "Create objects from YAML, or update those that exist (a merge of the manifest onto them).",
    ),
    "delete": Lazy(
        "herder.cli.objects", "delete", "Delete one object (KIND NAME), or the objects of -f FILE."
    ),
    "describe": Lazy(
        "herder.cli.objects",
        "describe",
        "Show one object: metadata, spec, status, conditions, and its recent audit events.",
    ),
    "serviceaccount": Lazy(
        "herder.cli.accounts", "app", "Service accounts: identities with a role, for scripts and providers."
    ),
    "jointoken": Lazy(
        "herder.cli.join_tokens", "app", "Join tokens: what lets machines join herder over SideroLink."
    ),
    "audit": Lazy(
        "herder.cli.audit", "audit_events", "Show recent audit events (readable by Admin and Support)."
    ),
    "cluster": Lazy("herder.cli.clusters", "app", "Clusters: their credentials, templates and operations."),
    "machine": Lazy("herder.cli.machines", "app", "Machines: register them, release them, read their logs."),
    "emu": Lazy("herder.cli.emu", "app", "The Talos emulator: many emulated Talos machines in one process."),
    "infraprovider": Lazy("herder.cli.infraproviders", "app", "Infra providers: register them, run them."),
    "machinerequest": Lazy(
        "herder.cli.infraproviders", "requests_app", "Machine requests: let go of stuck ones."
    ),
    "access": Lazy(
        "herder.cli.access", "app", "What the access policy gives you, or anyone, on each cluster."
    ),
    "debug": Lazy(
        "herder.cli.debug", "app", "What herder is made of: its controllers and what each reads and writes."
    ),
    "login": Lazy(
        "herder.cli.sso",
        "login",
        "Sign in to herder through its identity provider and write a kubeconfig that keeps you signed in "
        "(kubectl runs herder auth exec-credential: no token is written into the kubeconfig).",
    ),
    "logout": Lazy(
        "herder.cli.sso",
        "logout",
        "Sign out: revoke herder's token and the identity provider's refresh token, and forget them.",
    ),
    "auth": Lazy("herder.cli.sso", "auth_app", "Credentials for kubectl and other Kubernetes clients."),
}


def build() -> typer.Typer:
    """The application, its areas registered lazily."""
    app = typer.Typer(
        name="herder",
        cls=lazy_group(COMMANDS),
        help="herder: a management plane for Talos Linux Kubernetes clusters.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # Plain help, wrapped to the terminal: Rich's tables cut long option names short ("--managed-
        # control-pla…") at 80 columns or in a pipe, where a user or a script looks for them.
        rich_markup_mode=None,
    )

    # A callback keeps herder a group even when one command is registered (typer would run it bare).
    @app.callback()
    def _herder() -> None:
        pass

    return app


def main() -> None:
    build()()
