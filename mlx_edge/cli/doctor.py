"""`mlx-edge doctor`."""

from __future__ import annotations

import json
import sys

import click

from mlx_edge.errors import DOCTOR_NOT_LOCKED, DOCTOR_UNUSABLE


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--locked",
    is_flag=True,
    help="Also fail (exit 22) when an installed version differs from the locked set CI proved (CI uses this).",
)
@click.option(
    "--build",
    is_flag=True,
    help="Build mlx-edge's C++ CPU kernels for this machine if they are not built (~10 s, once; Linux).",
)
def doctor(as_json, locked, build):
    """Check versions against the tested set and the lock, devices, BLAS and CoreML support.

    Exits 0 when the install is usable; each mismatch comes with a one-line fix. A version that
    differs from the lock (mlx_edge/locks/) is a note unless --locked is given. --build (run by
    scripts/setup.sh) builds the C++ CPU kernels first; a failed build is a line in the report.

    \b
    Examples:
      mlx-edge doctor
      mlx-edge doctor --json
      mlx-edge doctor --locked     # exactly the locked set, or exit 22
      mlx-edge doctor --build      # build the C++ CPU kernels (Linux), then check
    """
    from mlx_edge.doctor import format_report, run_doctor  # lazy: --help stays instant

    report = run_doctor(build=build)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_report(report))
    if not report.usable:
        sys.exit(DOCTOR_UNUSABLE)
    sys.exit(DOCTOR_NOT_LOCKED if locked and not report.lock.get("matches") else 0)
