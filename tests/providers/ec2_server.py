"""moto's server (a real AWS API endpoint: EC2 here) as a child process on a loopback port, ended by its
PID, with AWS's own failures on request: moto never runs short of capacity, so a WSGI layer in front of it
answers chosen EC2 actions with the error AWS sends (its code, message and HTTP status) until cleared.

``python -m tests.providers.ec2_server PORT`` runs it; ``Ec2Server`` starts it and talks to it.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import boto3
import httpx

from tests.api.server import free_port
from tests.providers.child import Child

FAULTS = "/_faults"
REGION = "us-east-1"
CAPACITY = (
    "We currently do not have sufficient t3.small capacity in the Availability Zone you requested "
    "(us-east-1a). Our system will be working on provisioning additional capacity."
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class Faults:
    """WSGI: EC2 actions armed here fail as AWS fails them; everything else goes to moto."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self.armed: dict[str, dict[str, Any]] = {}

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == FAULTS:
            return self._control(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = _Replay(body)
        action = (parse_qs(body.decode("latin-1")).get("Action") or [""])[0]
        fault = self.armed.get(action)
        if fault is None:
            return self.app(environ, start_response)
        if fault["times"] > 0:
            fault["times"] -= 1
            if fault["times"] == 0:
                del self.armed[action]
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{escape(fault['code'])}</Code><Message>{escape(fault['message'])}</Message>"
            f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
        ).encode()
        start_response(
            f"{fault['status']} Error", [("Content-Type", "text/xml"), ("Content-Length", str(len(xml)))]
        )
        return [xml]

    def _control(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "DELETE":
            self.armed.clear()
        else:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            fault = json.loads(environ["wsgi.input"].read(length))
            self.armed[fault["action"]] = {
                "code": fault["code"],
                "message": fault.get("message", ""),
                "status": int(fault.get("status", 400)),
                "times": int(fault.get("times", 0)),
            }
        answer = json.dumps(self.armed).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
        return [answer]


class _Replay:
    """A request body read once by the fault layer, read again by moto."""

    def __init__(self, body: bytes) -> None:
        self._body, self._at = body, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._body) if size < 0 else min(len(self._body), self._at + size)
        chunk, self._at = self._body[self._at : end], end
        return chunk

    def readline(self, size: int = -1) -> bytes:
        end = self._body.find(b"\n", self._at)
        end = len(self._body) if end < 0 else end + 1
        if size >= 0:
            end = min(end, self._at + size)
        chunk, self._at = self._body[self._at : end], end
        return chunk


class Ec2Server(Child):
    """The server as a child process; ``ec2()`` is a boto3 client of it, as an operator's."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "tests.providers.ec2_server", str(self.port)]
        super().__init__(command, workdir / "moto-ec2.log", cwd=Path(__file__).parents[2])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_serving(self) -> Ec2Server:
        self.start(self.endpoint + "/moto-api/")
        return self

    def ec2(self) -> Any:
        return boto3.client(
            "ec2",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def fail(self, action: str, code: str, message: str, status: int = 400, times: int = 0) -> None:
        """The next ``times`` calls of ``action`` (0: every one until ``clear``) fail with AWS's error."""
        answer = httpx.post(
            self.endpoint + FAULTS,
            json={"action": action, "code": code, "message": message, "status": status, "times": times},
        )
        answer.raise_for_status()

    def clear(self) -> None:
        httpx.delete(self.endpoint + FAULTS).raise_for_status()


def main() -> None:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = Faults(DomainDispatcherApplication(create_backend_app))
    run_simple("127.0.0.1", int(sys.argv[1]), app, threaded=True)


if __name__ == "__main__":
    main()
