"""`mlx-edge doctor`."""

from __future__ import annotations

import json
import sys

import click

from mlx_edge.errors import DOCTOR_UNUSABLE


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json):
    """Check versions against the tested set, devices, BLAS and CoreML support.

    Exits 0 when the install is usable; each mismatch comes with a one-line fix.

    \b
    Example:
      mlx-edge doctor --json
    """
    from mlx_edge.doctor import format_report, run_doctor  # lazy: --help stays instant

    report = run_doctor()
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_report(report))
    sys.exit(0 if report.usable else DOCTOR_UNUSABLE)
