"""``python -m kiln ...``: runs the ``kiln`` command line installed with this package."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig


def cli_path() -> str:
    """The ``kiln`` executable installed with this package (the environment's
    scripts directory), else the first one on PATH."""
    for scheme_dir in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        p = os.path.join(scheme_dir, "kiln")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    p = shutil.which("kiln")
    if p:
        return p
    raise SystemExit("kiln: the kiln command line is not installed in this environment")


def main() -> None:
    exe = cli_path()
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
