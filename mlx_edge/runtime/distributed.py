"""Ranks under `torchrun` (the teacher stages) and under `mlx.launch` (distillation, MLX's own engine).

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them (or with WORLD_SIZE=1) this is one
process and every helper here is a no-op. torch is imported only when there is more than one rank,
so the MLX paths keep working without it.

`mlx.launch` starts the processes of an MLX job (several on one machine with `-n`, or one per host
of a hostfile) and `mx.distributed.init()` joins them; run alone, a process is rank 0 of 1.
"""

from __future__ import annotations

import atexit
import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as tdist  # lazy: optional, torchrun only

            tdist.barrier()

    def gather(self, value) -> list:
        """Every rank's `value`, in rank order (picklable objects; small ones: shard entries, counts)."""
        if self.world == 1:
            return [value]
        import torch.distributed as tdist  # lazy: optional, torchrun only

        values: list = [None] * self.world
        tdist.all_gather_object(values, value)
        return values


@functools.cache
def mlx_group():
    """MLX's group of `mlx.launch`'s processes, or None for one process (not launched, or a world of 1)."""
    import mlx.core as mx  # lazy: the torchrun helpers above need no MLX

    if not mx.distributed.is_available():
        return None
    group = mx.distributed.init()  # not launched: a group of one
    return group if group.size() > 1 else None


def init_ranks(backend: str = "gloo") -> Ranks:
    """This process's place under torchrun, the process group started if needed ("nccl" for CUDA training)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks()
    import torch.distributed as tdist  # lazy: optional, torchrun only

    if not tdist.is_initialized():
        tdist.init_process_group(backend=backend)
        # Without this, gloo's worker threads can still be alive while the interpreter shuts
        # down; one of them then aborts the rank ("terminate called without an active exception",
        # SIGABRT) after all its work is done and written. Destroying the group first is clean.
        atexit.register(_destroy_process_group)
    return Ranks(tdist.get_rank(), tdist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _destroy_process_group() -> None:
    import torch.distributed as tdist  # lazy: optional, torchrun only

    if tdist.is_initialized():
        tdist.destroy_process_group()
