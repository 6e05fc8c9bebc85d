"""What a runner hands back for one workload: the numbers to compare, and one synchronized step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Task:
    """One workload on one backend, built and ready: `step()` returns only after the work is done."""

    check: Callable[[], dict[str, np.ndarray]]
    step: Callable[[], None]
