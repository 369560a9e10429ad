"""Print the requirements of ditto-worker and some of its extras, from pyproject.toml alone.

Usage: ``python scripts/requirements.py [EXTRA,EXTRA...] [PYPROJECT]`` (default: no
extras, ./pyproject.toml). Self-references such as ``ditto-worker[retrieval]`` are expanded.
The Dockerfile installs these before it copies the source, so a code change does not
reinstall the dependencies (tests/unit/test_ops_files.py runs it).
"""

from __future__ import annotations

import re
import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    """The package's dependencies plus those of ``extras``, in order, each once.

    Raises:
        KeyError: an extra pyproject.toml does not define.
    """
    with open(pyproject, "rb") as file:
        project = tomllib.load(file)["project"]
    name = re.escape(project["name"])
    out: list[str] = list(project["dependencies"])
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for req in project["optional-dependencies"][extra]:
            own = re.fullmatch(rf"{name}\[(.+)\]", req)
            if own:
                todo.extend(e.strip() for e in own.group(1).split(","))
            else:
                out.append(req)
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    wanted = [e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e]
    print("\n".join(requirements(sys.argv[2] if len(sys.argv) > 2 else "pyproject.toml", wanted)))
