"""OpenStack's ``sushy-emulator`` as the Redfish tests run it, with each PATCH it accepts written to a file
(one JSON line: path and body). Its drivers keep no ``BootSourceOverrideEnabled``: a System shows
``Continuous`` whatever a client asks for, so a test reads from here that the provider asked for ``Once``.

``python -m tests.providers.sushy_server RECORD ARGS…`` runs ``sushy-emulator ARGS…``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import flask
from sushy_tools.emulator import main as emulator


def main() -> None:
    record = Path(sys.argv.pop(1))

    # Runs behind the emulator's basic authentication: only what it let in is written.
    @emulator.app.before_request
    def _record() -> None:
        if flask.request.method == "PATCH":
            line = {"path": flask.request.path, "body": flask.request.get_json(silent=True)}
            with record.open("a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")

    sys.exit(emulator.main())


if __name__ == "__main__":
    main()
