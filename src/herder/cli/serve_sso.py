"""``herder serve``'s single sign-on flags (``--oidc-…``) and the web UI's session timeouts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herder.api.cluster_access import LADDER
from herder.api.oidc import OidcSettings, read_client_secret
from herder.cli.errors import fail

OidcIssuerOption = Annotated[
    str | None,
    typer.Option(
        "--oidc-issuer",
        help="URL of the OpenID Connect provider people sign in with (its discovery document is read at "
        "start; https, or http on a loopback address for tests and demos).",
        show_default=False,
    ),
]
OidcClientIdOption = Annotated[
    str | None,
    typer.Option(
        "--oidc-client-id",
        help="herder's client id at the provider (the web UI's; redirect URI "
        "https://HOST:PORT/ui/auth/oidc/callback).",
        show_default=False,
    ),
]
OidcClientSecretFileOption = Annotated[
    Path | None,
    typer.Option(
        "--oidc-client-secret-file",
        help="A file holding the client's secret (none: a public client, PKCE only).",
        show_default=False,
    ),
]
OidcCliClientIdOption = Annotated[
    str | None,
    typer.Option(
        "--oidc-cli-client-id",
        help="The client id herder login signs in with: a native (public) client with the redirect "
        "http://127.0.0.1/callback, any port, and the device grant (default: --oidc-client-id).",
        show_default=False,
    ),
]
OidcCliClientSecretOption = Annotated[
    str | None,
    typer.Option(
        "--oidc-cli-client-secret",
        help="Only for a provider that wants a secret of the CLI's native client all the same (Google's "
        "Desktop app clients): herder hands it to every herder login, so it must not be a confidential "
        "client's secret (needs its own --oidc-cli-client-id).",
        show_default=False,
    ),
]
OidcScopesOption = Annotated[
    str, typer.Option("--oidc-scopes", help="The scopes asked for, separated by spaces (openid is required).")
]
OidcGroupsClaimOption = Annotated[
    str,
    typer.Option(
        "--oidc-groups-claim",
        help="The ID token's claim listing the person's groups (labels groups.herder.dev/…).",
    ),
]
OidcDefaultRoleOption = Annotated[
    str,
    typer.Option(
        "--oidc-default-role",
        help=f"The role of a person at their first sign-in when no RoleRule matches: {', '.join(LADDER)}.",
    ),
]
OidcUnverifiedEmailOption = Annotated[
    bool,
    typer.Option(
        "--oidc-allow-unverified-email",
        help="Name people by their email even when the provider does not say it is verified (Entra ID).",
    ),
]
OidcCaFileOption = Annotated[
    Path | None,
    typer.Option(
        "--oidc-ca-file", help="The CA (PEM) of the provider, when it is a private one.", show_default=False
    ),
]
OidcProviderNameOption = Annotated[
    str | None,
    typer.Option(
        "--oidc-provider-name",
        help="What the web UI's \"Sign in with\" button calls the provider (default: the issuer's host).",
        show_default=False,
    ),
]
SessionIdleOption = Annotated[
    int,
    typer.Option(
        "--session-idle-timeout", min=60, help="Seconds a web UI session may go unused before it ends."
    ),
]
SessionMaxAgeOption = Annotated[
    int,
    typer.Option(
        "--session-max-age", min=60, help="Seconds after which a web UI session ends, however used."
    ),
]


def oidc_settings(
    issuer: str | None,
    client_id: str | None,
    client_secret_file: Path | None,
    cli_client_id: str | None,
    cli_client_secret: str | None,
    scopes: str,
    groups_claim: str,
    default_role: str,
    allow_unverified_email: bool,
    ca_file: Path | None,
    provider_name: str | None,
) -> OidcSettings | None:
    """The settings the flags give, or None without ``--oidc-issuer``; a one-line error for what cannot go."""
    if issuer is None:
        given = [
            flag
            for flag, value in (
                ("--oidc-client-id", client_id),
                ("--oidc-client-secret-file", client_secret_file),
                ("--oidc-cli-client-id", cli_client_id),
                ("--oidc-cli-client-secret", cli_client_secret),
                ("--oidc-ca-file", ca_file),
                ("--oidc-provider-name", provider_name),
            )
            if value is not None
        ]
        if given:
            raise fail(f"{', '.join(given)}: only meaningful with --oidc-issuer")
        return None
    if not client_id:
        raise fail("--oidc-issuer needs --oidc-client-id: herder's client id at the provider")
    if cli_client_secret is not None and (not cli_client_id or cli_client_id == client_id):
        raise fail(
            "--oidc-cli-client-secret is handed to every herder login: give the CLI a native client of its "
            "own with --oidc-cli-client-id, never the web UI's"
        )
    if cli_client_secret is not None and not cli_client_secret.strip():
        raise fail("--oidc-cli-client-secret: must not be empty")
    words = tuple(scopes.split())
    if "openid" not in words:
        raise fail(f"--oidc-scopes {scopes!r}: must include openid")
    if default_role not in LADDER:
        raise fail(f"--oidc-default-role {default_role!r}: one of {', '.join(LADDER)}")
    if not groups_claim:
        raise fail("--oidc-groups-claim: must name a claim")
    try:
        secret = read_client_secret(client_secret_file) if client_secret_file is not None else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    return OidcSettings(
        issuer=issuer,
        client_id=client_id,
        client_secret=secret,
        cli_client_id=cli_client_id,
        cli_client_secret=cli_client_secret.strip() if cli_client_secret else None,
        scopes=words,
        groups_claim=groups_claim,
        default_role=default_role,
        allow_unverified_email=allow_unverified_email,
        ca_file=ca_file,
        provider_name=provider_name or "",
    )
