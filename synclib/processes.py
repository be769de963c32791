"""Whether a process of this host is alive, by its pid."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (owned by any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        pass
    return True
