"""What redaction takes out: every secret of a cluster's bundle in each form a program prints it (the
values of a generated Talos config among them), and whatever looks like a secret of any cluster."""

from __future__ import annotations

import base64

import yaml

from herder.talos.contracts import VersionContract
from herder.talos.generate import generate_config
from herder.talos.generate_input import ConfigInput, MachineType
from herder.talos.redaction import REDACTED, LineRedactor, Redactor, bundle_secrets
from herder.talos.secrets import load_secrets
from tests.controllers.site import secrets_bundle

BUNDLE = load_secrets(secrets_bundle("1.13"), check_keys=False)


def test_every_secret_of_the_bundle_is_taken_out_in_each_form() -> None:
    redact = Redactor(bundle_secrets(BUNDLE))
    for secret in (
        BUNDLE.cluster_secret,
        BUNDLE.bootstrap_token,
        BUNDLE.trustd_token,
        BUNDLE.secretbox_encryption_secret,
        base64.b64encode(BUNDLE.os.key).decode(),
        base64.b64encode(BUNDLE.k8s_service_account_key).decode(),
    ):
        line = f'level=info msg="dumping config" value={secret} next'
        assert secret not in redact(line)
        assert REDACTED in redact(line)
    # A key printed as PEM, over several lines: each line of its body is known.
    for line in BUNDLE.etcd.key.decode().splitlines()[1:-1]:
        assert REDACTED in redact(line) and line not in redact(line)


def test_a_generated_configs_secrets_are_taken_out() -> None:
    contract = VersionContract.parse("1.13")
    config = generate_config(
        ConfigInput(
            cluster_name="alpha",
            endpoint="https://10.0.0.1:6443",
            kubernetes_version="1.33.0",
            contract=contract,
            secrets=BUNDLE,
        ),
        MachineType.CONTROLPLANE,
    )
    redacted = Redactor(bundle_secrets(BUNDLE))(config)
    document = next(yaml.safe_load_all(redacted))
    assert document["machine"]["token"] == REDACTED
    assert document["machine"]["ca"]["key"] == REDACTED
    assert document["cluster"]["secret"] == REDACTED
    assert document["cluster"]["token"] == REDACTED
    assert document["cluster"]["serviceAccount"]["key"] == REDACTED
    assert document["machine"]["ca"]["crt"] != REDACTED  # a certificate is no secret


def test_what_looks_like_a_secret_of_any_cluster_is_taken_out() -> None:
    redact = Redactor()
    assert redact("joined with token abcdef.0123456789abcdef ok") == f"joined with token {REDACTED} ok"
    assert redact("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.x.y") == f"Authorization: Bearer {REDACTED}"
    assert redact("token hdr_t-abc_" + "0" * 64) == f"token {REDACTED}"
    cmdline = "Command line: siderolink.api=grpc://[fd00::1]:8099?jointoken=hjt_edge_" + "f" * 64
    assert redact(f"{cmdline} console=ttyS0") == (
        f"Command line: siderolink.api=grpc://[fd00::1]:8099?jointoken={REDACTED} console=ttyS0"
    )
    key = base64.b64encode(
        b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n"
    ).decode()
    assert redact(f"key: {key}") == f"key: {REDACTED}"
    certificate = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
    assert redact(f"crt: {certificate}") == f"crt: {certificate}"
    assert (
        redact("an ordinary line, nothing secret: 10.5.0.2:50000")
        == "an ordinary line, nothing secret: 10.5.0.2:50000"
    )


def test_a_private_key_printed_over_several_lines_is_taken_out_line_by_line() -> None:
    redact = LineRedactor(Redactor())
    lines = [
        "loaded key:",
        "-----BEGIN PRIVATE KEY-----",
        "MC4CAQAwBQYDK2VwBCIEI",
        "-----END PRIVATE KEY-----",
        "done",
    ]
    assert [redact(line) for line in lines] == [
        "loaded key:",
        f"-----BEGIN PRIVATE KEY-----{REDACTED}",
        REDACTED,
        f"{REDACTED}-----END PRIVATE KEY-----",
        "done",
    ]
