"""The Dockerfile read with Docker's own parser (the `dockerfile` package)."""

from __future__ import annotations

from pathlib import Path

import dockerfile


def stages(path: Path) -> list[list[dockerfile.Command]]:
    """Instructions grouped by build stage (each starts at a FROM)."""
    grouped: list[list[dockerfile.Command]] = []
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            grouped.append([])
        if grouped:
            grouped[-1].append(command)
    return grouped


def build_stage_copies(path: Path) -> list[str]:
    """Sources of the first stage's COPY instructions: the image's build context."""
    return [source for command in stages(path)[0] if command.cmd == "COPY" for source in command.value[:-1]]


def arg_default(commands: list[dockerfile.Command], name: str) -> str:
    """The default value of ``ARG name=value`` among the given instructions."""
    for command in commands:
        if command.cmd == "ARG" and command.value[0].startswith(f"{name}="):
            return command.value[0].split("=", 1)[1]
    raise KeyError(f"no ARG {name}=... in the Dockerfile")


def global_args(path: Path) -> list[dockerfile.Command]:
    """The ARG instructions before the first FROM."""
    commands = []
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            break
        commands.append(command)
    return commands
