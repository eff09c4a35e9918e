"""Print the image build's constraints (constraints.txt): every runtime dependency, pinned.

Run it with the Python of an environment where the project is installed (``make setup``):
``.venv/bin/python scripts/lock_constraints.py > constraints.txt``. It walks the project's
requirements (no extras) through the installed distributions and pins each at the version
installed, plus the build backend the wheel is built with (``--build-backend``).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "trainlog-exporter"


def runtime_pins(project: str = PROJECT) -> dict[str, str]:
    """Name -> installed version of every distribution the project needs at run time (markers of this platform)."""
    pins: dict[str, str] = {}
    pending = [Requirement(text) for text in metadata.requires(project) or []]
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or another platform's
        name = canonicalize_name(requirement.name)
        if name in pins:
            continue
        distribution = metadata.distribution(requirement.name)
        pins[name] = distribution.version
        pending += [Requirement(text) for text in distribution.requires or []]
    return pins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-backend", default="setuptools==84.2.1",
                        help="the build backend's pin (default: %(default)s)")
    arguments = parser.parse_args()
    print("# The image build's pins (Dockerfile: PIP_CONSTRAINT), from scripts/lock_constraints.py; regenerate with")
    print("#   .venv/bin/python scripts/lock_constraints.py > constraints.txt")
    print("# Runtime dependencies of trainlog-exporter, at the versions its tests ran with:")
    for name, version in sorted(runtime_pins().items()):
        print(f"{name}=={version}")
    print("# The build backend, for the wheel (pyproject.toml [build-system]):")
    print(arguments.build_backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
