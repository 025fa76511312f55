"""``python -m herder.bench NAME [OPTIONS]``: run one benchmark by name."""

from __future__ import annotations

import importlib
import signal
import sys
from types import FrameType

BENCHMARKS = {
    "store": "herder.bench.store",
    "api": "herder.bench.api",
    "emu": "herder.bench.emu",
    "clusters": "herder.bench.clusters",
    "upgrades": "herder.bench.upgrades",
    "provision": "herder.bench.provision",
    "web": "herder.bench.web",
    "managed": "herder.bench.managed",
    "gateway": "herder.bench.gateway",
    "cli": "herder.bench.cli",
    "proxy": "herder.bench.proxy",
    "steady": "herder.bench.steady",
}


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in BENCHMARKS:
        print(f"usage: python -m herder.bench {{{'|'.join(sorted(BENCHMARKS))}}} [OPTIONS]", file=sys.stderr)
        return 2
    # A benchmark stopped by SIGTERM unwinds as on Ctrl-C: it ends the servers and emulators it
    # started (by their PIDs) instead of leaving them running, to skew whatever is measured next.
    signal.signal(signal.SIGTERM, _interrupt)
    module = importlib.import_module(BENCHMARKS[args[0]])
    result: int = module.main(args[1:])
    return result


if __name__ == "__main__":
    sys.exit(main())
