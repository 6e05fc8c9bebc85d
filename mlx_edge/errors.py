"""The one error hierarchy of mlx-edge, and what each exit code means.

Library code raises these with a message that says what is wrong and what to do; only the CLI
turns them into a single line on stderr and the class's exit code. Each exit code means one thing:
a subclass shares its parent's code only where it is a special case of the same problem. The
docs/troubleshooting.md's "Exit codes" table is `EXIT_CODES` (a test keeps them equal).
"""

from __future__ import annotations


class MlxEdgeError(Exception):
    """Base class: a problem the user can fix. `hint` says how."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class DataError(MlxEdgeError):
    """A labeled-data file that cannot be used as it is."""

    exit_code = 3


class ModelError(MlxEdgeError):
    """A model directory or config that is missing, broken or not BERT-like."""

    exit_code = 4


class DeviceError(MlxEdgeError):
    """A requested device that is not available here."""

    exit_code = 5


class EnvironmentProblem(MlxEdgeError):
    """A missing or incompatible package or system library."""

    exit_code = 6


class TargetsError(MlxEdgeError):
    """A targets cache that is missing, damaged, or made for another setup."""

    exit_code = 7


class SetupMismatch(TargetsError):
    """The output directory holds (part of) a cache made with other settings."""


class DistillError(MlxEdgeError):
    """A distillation setup that cannot work, or a run that went bad."""

    exit_code = 8


class WorkMismatch(DistillError):
    """An interrupted run's work directory made with other settings."""


class ExportError(MlxEdgeError):
    """An export that cannot be made, or whose result failed its own checks."""

    exit_code = 9


class BundleError(MlxEdgeError):
    """A path that is not an export bundle, or a bundle whose programs cannot be read or evaluated."""

    exit_code = 10


class UnsupportedOpError(BundleError):
    """The program has an op type the NumPy MIL interpreter cannot evaluate."""


class ConfigError(MlxEdgeError):
    """Settings that cannot be run as written: a pipeline config, or values out of range or not fitting the model."""

    exit_code = 12


class BenchError(MlxEdgeError):
    """A benchmark that cannot be set up as asked."""

    exit_code = 13


class AugmentError(MlxEdgeError):
    """An augment output that cannot be written, or that holds another run's work."""

    exit_code = 15


class AugmentMismatch(AugmentError):
    """The output holds (part of) an augment run made with other settings."""


class ManifestError(MlxEdgeError):
    """A stage directory whose mlx_edge_manifest.json is unreadable or made by another stage."""

    exit_code = 17


class OutputError(MlxEdgeError):
    """An output path that cannot be written as asked: it exists (no --force), it is or holds an input,
    or the file system refuses it (no permission, read-only, disk full, a file where a folder should be)."""

    exit_code = 18


class TeacherError(MlxEdgeError):
    """A teacher training run that went bad (a NaN/inf loss)."""

    exit_code = 19


class AdaptError(MlxEdgeError):
    """A LoRA adapter run that went bad (a NaN/inf loss)."""

    exit_code = 20


class ServeError(MlxEdgeError):
    """`mlx-edge serve` cannot start or do as asked: a remote --host without --allow-remote, no admin
    password, a port in use, an unknown or existing user."""

    exit_code = 21


class MlxEdgeWarning(UserWarning):
    """Something that runs but looks wrong: the CLI prints it as one `warning:` line."""


class UnknownTokensWarning(MlxEdgeWarning):
    """Many training tokens are unknown to the tokenizer: the model cannot read that text (the CLI prints one line)."""


class DataWarning(MlxEdgeWarning):
    """A labeled file that reads but looks wrong: repeated texts, labels seen once, dev texts in training."""


# Verdicts that are not exceptions: the command ran, and what it examined did not pass.
CHECK_FAILED = 11
BENCH_DISAGREEMENT = 14
DOCTOR_UNUSABLE = 16
DOCTOR_NOT_LOCKED = 22
INTERRUPTED = 130

EXIT_CODES = {
    0: "success",
    1: "an unexpected error (a bug: please report it with the command)",
    2: "a command-line usage error (unknown option, bad value)",
    DataError.exit_code: "data: a labeled file that cannot be used as it is",
    ModelError.exit_code: "model: a model directory or config that is missing, broken or not BERT-like",
    DeviceError.exit_code: "device: the requested device is not available here",
    EnvironmentProblem.exit_code: "environment: a missing or incompatible package or system library",
    TargetsError.exit_code: "targets: a targets cache that is missing, damaged or made for another setup",
    DistillError.exit_code: "distill: a setup that cannot work, a run that went bad, or another run's work",
    ExportError.exit_code: "export: the bundle could not be made, or failed its own checks (nothing written)",
    BundleError.exit_code: "bundle: not an export bundle, or its programs cannot be read or evaluated",
    CHECK_FAILED: "check: the bundle was examined and at least one check failed",
    ConfigError.exit_code: "config: settings that cannot be run as written (a pipeline config, or values out of range)",
    BenchError.exit_code: "bench: a benchmark that cannot be set up as asked",
    BENCH_DISAGREEMENT: "bench: backends disagree on the same inputs (no ranking is given)",
    AugmentError.exit_code: "augment: an output that cannot be written or holds another run's work",
    DOCTOR_UNUSABLE: "doctor: the install is not usable as it is",
    DOCTOR_NOT_LOCKED: "doctor --locked: an installed version differs from the locked set (bash scripts/setup.sh installs it)",
    ManifestError.exit_code: "manifest: a stage directory's mlx_edge_manifest.json is unreadable or of another kind",
    OutputError.exit_code: "output: --out cannot be written (it exists, is or holds an input, or the file system refuses it)",
    TeacherError.exit_code: "teacher: a training run that went bad (a NaN/inf loss; nothing was written)",
    AdaptError.exit_code: "adapt: a LoRA adapter run that went bad (a NaN/inf loss; nothing was written)",
    ServeError.exit_code: "serve: the service cannot start or do as asked (remote host, no password, port in use, user)",
    INTERRUPTED: "interrupted (Ctrl-C); re-running the same command resumes where it can",
}
