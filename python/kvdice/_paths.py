"""Where named models are pulled to: $KVDICE_HOME, else ~/.cache/kvdice (as the command line)."""

import os
from pathlib import Path


def kvdice_home() -> str:
    return os.environ.get("KVDICE_HOME") or str(Path.home() / ".cache" / "kvdice")
