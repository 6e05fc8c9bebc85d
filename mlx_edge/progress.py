"""The one progress bar every long stage draws (to stderr), or None when progress is off.

A host that shows progress elsewhere (`mlx-edge serve`'s worker process) sets an observer: every bar
is then made, drawn or not, and reports each change to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tqdm import tqdm

_observer: Callable[[dict], None] | None = None


def set_observer(callback: Callable[[dict], None] | None) -> None:
    """Send every bar's changes to `callback` (None stops): a dict with desc, n, total, the postfix's
    numbers (`values`: loss, samples/s, ...) and `closed`. It runs on the training thread: keep it cheap."""
    global _observer
    _observer = callback


def progress_bar(total: int, *, desc: str, unit: str, enabled: bool, initial: int = 0):
    if _observer is not None:
        # An unseen bar still counts: it draws into /dev/null when the stage's progress is off.
        file = None if enabled else open(os.devnull, "w")  # closed with the bar
        return _ObservedBar(_observer, total=total, initial=initial, desc=desc, unit=unit, leave=False, file=file)
    if not enabled:
        return None

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False)


class _ObservedBar(tqdm):
    """A tqdm bar that also tells the observer where it is and what its postfix says."""

    def __init__(self, observer: Callable[[dict], None], **kwargs):
        self._observer, self._values, self._devnull = observer, {}, kwargs.get("file")
        super().__init__(disable=False, **kwargs)
        self._report(closed=False)

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        given = {**(ordered_dict or {}), **kwargs}
        self._values = {k: number for k, v in given.items() if (number := _number(v)) is not None}
        super().set_postfix(ordered_dict, refresh=refresh, **kwargs)

    def update(self, n=1):
        shown = super().update(n)
        self._report(closed=False)
        return shown

    def close(self):
        if not self.disable:  # tqdm closes a bar once; a second close is a no-op there too
            self._report(closed=True)
        super().close()
        if self._devnull is not None and not self._devnull.closed:
            self._devnull.close()

    def _report(self, *, closed: bool) -> None:
        self._observer({"desc": self.desc, "n": self.n, "total": self.total, "values": self._values, "closed": closed})


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
