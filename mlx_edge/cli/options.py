"""What every command shares: the error-to-exit-code layer and the common options.

Only click is imported here, so `mlx-edge --help` stays instant.
"""

from __future__ import annotations

import errno
import math
import sys
import warnings
from pathlib import Path

import click

from mlx_edge.errors import INTERRUPTED, MlxEdgeError, MlxEdgeWarning, OutputError


class UserError(click.ClickException):
    """An MlxEdgeError shown as one line, with the error class's exit code."""

    def __init__(self, error: MlxEdgeError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


_library_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Our own warnings as one line on stderr; everyone else's as Python prints them."""
    if issubclass(category, MlxEdgeWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        _library_showwarning(message, category, filename, lineno, file, line)


# What to do when the file system refuses a path, by errno; the rest get the last hint.
_OS_HINTS = {
    errno.EACCES: "no permission to write there: choose another --out, or fix the folder's permissions",
    errno.EPERM: "no permission to write there: choose another --out, or fix the folder's permissions",
    errno.EROFS: "the file system is read-only: choose another --out",
    errno.ENOSPC: "the disk is full: free some space, or choose an --out on another disk",
    errno.EDQUOT: "the disk quota is used up: free some space, or choose an --out on another disk",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another --out",
    errno.EEXIST: "a file of that name stands where a folder is needed: choose another --out",
    errno.EISDIR: "that path is a folder where a file was expected: choose another path",
}


def file_system_error(error: OSError) -> OutputError:
    """An OSError of the file system (permission, read-only, disk full, a file in the way) as one line
    that names the path; the library lets these through, as every stage writes through the same calls."""
    where = error.filename if error.filename is not None else "a file"
    also = f" (or {error.filename2})" if error.filename2 is not None else ""
    reason = error.strerror or str(error)
    hint = _OS_HINTS.get(error.errno, "check that the path is writable and the disk has space, or choose another --out")
    return OutputError(f"cannot write {where}{also}: {reason}", hint)


def _close_progress_bars() -> None:
    """Close the bars a failing stage left open (tqdm keeps a set of them), so that the Error line
    starts a line of its own instead of trailing a half-drawn bar."""
    tqdm = sys.modules.get("tqdm")  # never imported: no bar was drawn
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


class Group(click.Group):
    def invoke(self, ctx):
        warnings.showwarning = _show_warning
        try:
            return super().invoke(ctx)
        except MlxEdgeError as error:
            _close_progress_bars()
            raise UserError(error) from None
        except OSError as error:  # not a bug of ours: the file system said no (click's own I/O errors aside)
            if error.errno in (None, errno.EPIPE):
                raise
            _close_progress_bars()
            raise UserError(file_system_error(error)) from None
        except KeyboardInterrupt:
            click.echo("\nInterrupted: run the same command again to resume where it can.", err=True)
            ctx.exit(INTERRUPTED)


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (FloatRange lets nan through every bound)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class ShareOrAuto(click.ParamType):
    """A number, or the word auto (a setting whose default the run decides). Its range is the setting's
    own (settings.py `LIMITS`), checked before any work."""

    name = "auto|share"

    def convert(self, value, param, ctx):
        if isinstance(value, float) or value == "auto":
            return value
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither auto nor a number from 0 to 1", param, ctx)


class OldName(click.Option):
    """The old spelling of the option `new`, hidden and kept for one release: given, it prints a note and
    its text goes to `new` as if `new` had been given (so `new`'s type checks it, and the command sees
    its value given on the command line); given together with `new`, it is a usage error."""

    def __init__(self, *args, new: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.new = new

    def target(self, command: click.Command) -> click.Option:
        """The current option this spelling stands for."""
        return next(p for p in command.params if self.new in getattr(p, "opts", ()) and not p.hidden)

    def handle_parse_result(self, ctx, opts, args):
        # Eager: this runs before the options that are not, so the value is in place when `new`'s turn comes.
        if self.name in opts:
            old, name = self.opts[0], self.target(ctx.command).name
            if name in opts:
                raise click.UsageError(f"{old} and {self.new} are one option: give {self.new} only", ctx)
            if not ctx.resilient_parsing:
                click.echo(f"note: {old} is now {self.new}; the old spelling goes in the next release", err=True)
            opts[name] = opts.pop(self.name)
        return super().handle_parse_result(ctx, opts, args)


def renamed(old: str, new: str):
    """A click decorator: `old` (e.g. "--lr") keeps working as a hidden spelling of the option `new`."""
    return click.option(
        old,
        "old_" + old.lstrip("-").replace("-", "_"),  # its own name: "--learning-rate" may be another option's
        cls=OldName,
        new=new,
        hidden=True,
        is_eager=True,
        expose_value=False,
        help=f"The old spelling of {new}, kept for one release.",
    )


device_option = click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "gpu", "cuda", "mps"]),
    default="auto",
    show_default=True,
    help="Where to compute: auto picks MLX GPU (Metal/CUDA) or PyTorch CUDA > MPS > CPU.",
)
column_options = [
    click.option("--text-column", default=None, help="Text column name (or 0-based index); found by name if omitted."),
    click.option("--label-column", default=None, help="Label column name (or index); found by name if omitted."),
]


def unlabeled_options_for(what: str) -> list:
    """--unlabeled (repeatable) and --unlabeled-column; `what` says what the command does with the text."""
    return [
        click.option(
            "--unlabeled",
            "unlabeled_paths",
            type=click.Path(path_type=Path),
            multiple=True,
            help=f"Text with no label (one text per line, or a .csv/.tsv/.jsonl text column), {what}. Repeatable.",
        ),
        click.option(
            "--unlabeled-column",
            default=None,
            help="The text column of --unlabeled .csv/.tsv/.jsonl files (found by name if omitted).",
        ),
    ]


unlabeled_options = unlabeled_options_for(
    "added as a transfer set: the student learns the teacher on it, cross-entropy stays on labeled rows; "
    "texts equal to dev texts are dropped"
)


def option_group(options: list):
    """A decorator that adds `options` to a command, in the order listed (its --help shows them so)."""

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


with_unlabeled = option_group(unlabeled_options)
with_columns = option_group(column_options)


def echo_err(message: str, quiet: bool = False) -> None:
    if not quiet:
        click.echo(message, err=True)


def layer_list(ctx, param, value):
    """A click callback: "2,4,6" -> [2, 4, 6]."""
    if not value:
        return []
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("give layer numbers separated by commas, e.g. 2,4,6") from None


def select_option(settings):
    """--select with `settings`' default (teacher train, distill): the epoch kept."""
    return click.option(
        "--select",
        type=click.Choice(settings.CHOICES["select"]),
        default=settings.select,
        show_default=True,
        help="The epoch kept: best on dev, the last, or auto: the last when the dev split has fewer than 200 rows "
        "(a small dev split picks epochs by noise).",
    )


def optimizer_options(settings):
    """--warmup-ratio, --weight-decay, --grad-accum, --max-grad-norm with `settings`' defaults (teacher train, distill)."""
    options = [
        click.option(
            "--warmup-ratio",
            type=FiniteFloatRange(0, 1),
            default=settings.warmup_ratio,
            show_default=True,
            help="Share of steps with linear warmup; then linear decay.",
        ),
        click.option(
            "--weight-decay",
            type=FiniteFloatRange(0),
            default=settings.weight_decay,
            show_default=True,
            help="AdamW weight decay.",
        ),
        click.option(
            "--grad-accum",
            type=click.IntRange(1),
            default=settings.grad_accum,
            show_default=True,
            help="Batches per optimizer step.",
        ),
        click.option(
            "--max-grad-norm",
            type=FiniteFloatRange(0, min_open=True),
            default=settings.max_grad_norm,
            show_default=True,
            help="Gradient clipping norm.",
        ),
    ]
    return option_group(options)
