"""The `mlx-edge` command line: parse, call the library, print. Nothing else lives here.

Heavy imports (mlx, torch, transformers) happen inside commands so `mlx-edge --help` is instant.
Only stages that are built are registered: there are no placeholder commands.
"""

from __future__ import annotations

import click

from mlx_edge import __version__
from mlx_edge.cli import augment, bench, data, distill, doctor, export, init, predict, run, serve, teacher
from mlx_edge.cli.options import Group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlx-edge")
def main():
    """mlx-edge: labeled text → BERT teacher → small MLX student → updatable CoreML classifier.

    \b
    Start here:
      mlx-edge doctor                          is this install usable, which devices and BLAS
      mlx-edge demo                            the whole pipeline on the dataset mlx-edge ships
      mlx-edge data train.csv                  check a labeled file before training
      mlx-edge init my.toml --train train.csv  a config for your files, every setting commented
      mlx-edge run my.toml                     your data: teacher → student → checked CoreML bundle
      mlx-edge serve                           the same from a browser: log in, start jobs, watch the curves
    """


for command in (
    doctor.doctor,
    data.data,
    init.init,
    predict.predict,
    teacher.teacher,
    augment.augment,
    distill.distill,
    export.export,
    export.check,
    run.run,
    run.demo,
    bench.bench,
    serve.serve,
):
    main.add_command(command)
