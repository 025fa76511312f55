"""A real API server for the ``krm`` tests: ``build_app(herder_registry(), store, policy)`` served by
uvicorn in a subprocess over HTTPS, with a self-signed CA made here, and a kubeconfig pointing
kubectl at it. Servers are ended by PID, even when a test fails.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from herder.bench.api import server_process

KUBECTL = "/usr/bin/kubectl"


@dataclass(frozen=True)
class Tls:
    ca: Path
    cert: Path
    key: Path


def _issue(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is not None:
        sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """A CA and a serving certificate for 127.0.0.1 and localhost that it signs."""
    out = tmp_path_factory.mktemp("tls")
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _issue("krm test CA", ca_key, None)
    cert = _issue("127.0.0.1", key, (ca.subject, ca_key))
    files = Tls(out / "ca.crt", out / "tls.crt", out / "tls.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files


@dataclass(frozen=True)
class Server:
    url: str
    tls: Tls
    kubeconfig: Path
    cache_dir: Path

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, verify=ssl.create_default_context(cafile=self.tls.ca), timeout=20
        )

    def kubectl_command(self, *args: str) -> list[str]:
        """The kubectl command line for ``args`` against this server."""
        return [KUBECTL, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache_dir}", *args]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this server; ``check`` fails the test on a non-zero exit."""
        proc = subprocess.run(
            self.kubectl_command("--request-timeout=20s", *args),
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECTL_INTERACTIVE_DELETE": "false"},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc


def serve_krm(tls: Tls, out: Path, *args: str) -> Iterator[Server]:
    """A krm server subprocess with an empty memory store; ``args`` go to its command line."""
    with server_process(
        "--state", "memory://", "--tls-cert", str(tls.cert), "--tls-key", str(tls.key), *args
    ) as port:
        url = f"https://127.0.0.1:{port}"
        kubeconfig = out / "kubeconfig"
        kubeconfig.write_text(
            f"""apiVersion: v1
kind: Config
clusters:
- name: krm
  cluster: {{server: "{url}", certificate-authority: "{tls.ca}"}}
users:
- name: anonymous
  user: {{token: not-checked}}
contexts:
- name: krm
  context: {{cluster: krm, user: anonymous, namespace: default}}
current-context: krm
"""
        )
        yield Server(url, tls, kubeconfig, out / "cache")


@pytest.fixture(scope="session")
def server(tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One allow-all server shared by the session; tests use names of their own."""
    yield from serve_krm(tls, tmp_path_factory.mktemp("server"))


@pytest.fixture(scope="session")
def guarded_server(tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the ``tests.krm.policies.Guarded`` policy: locked and hidden objects."""
    yield from serve_krm(tls, tmp_path_factory.mktemp("guarded"), "--policy", "tests.krm.policies:Guarded")
