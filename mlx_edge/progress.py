"""The one progress bar every long stage draws (to stderr), or None when progress is off."""

from __future__ import annotations

from tqdm import tqdm


def progress_bar(total: int, *, desc: str, unit: str, enabled: bool, initial: int = 0):
    if not enabled:
        return None

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False)
