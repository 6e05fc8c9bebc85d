"""The updatable classifier head: a NeuralNetwork `.mlmodel` (innerProduct -> softmax) for MLUpdateTask.

An mlprogram cannot be updatable, and converted PyTorch heads come out as batchedMatMul/softmaxND
which cannot be either (coremltools: only innerProduct/convolution layers of a NeuralNetwork model can be updatable). So the head is built layer by layer with `NeuralNetworkBuilder`
from the student's own classifier weights (FP32: updatable layers refuse FP16). Its input is the
encoder's pooled `embedding`.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bridges.coreml_export import spec_features

INPUT_NAME = "embedding"
LOGITS_NAME = "logits"
PROBS_NAME = "probs"
DENSE_LAYER = "classifier"
SOFTMAX_LAYER = "softmax"
LOSS_LAYER = "loss"
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
# the head's learning rate where nothing sets it from the embeddings (build_head called directly)
HEAD_RATE = 0.05
# the export's default: this share of 1 / the top eigenvalue of the embeddings' second moment (export.head_rate)
HEAD_STEP = 0.5
EPOCHS = tuple(range(1, 201))


@dataclass(frozen=True)
class HeadTraining:
    """What MLUpdateTask will use by default, and the ranges an app may override within."""

    optimizer: str = "sgd"  # "sgd" (default: Adam keeps two more copies of the weights) or "adam"
    learning_rate: float | None = HEAD_RATE  # None: the export sets it from the embeddings (export.head_rate)
    learning_rate_range: tuple[float, float] = (1e-5, 1.0)
    batch_size: int = 8
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    epochs: int = 20
    epochs_allowed: tuple[int, ...] = field(default=EPOCHS)


def build_head(weight: np.ndarray, bias: np.ndarray, training: HeadTraining):
    """The updatable head's spec: `embedding` [H] -> innerProduct -> softmax -> `probs` [N]."""
    from coremltools.models import datatypes  # lazy: coremltools: ~4 s import, for conversion and checks only
    from coremltools.models.neural_network import (  # lazy: coremltools: ~4 s import, for conversion and checks only
        AdamParams,
        NeuralNetworkBuilder,
        SgdParams,
    )

    n, h = weight.shape
    builder = NeuralNetworkBuilder(
        [(INPUT_NAME, datatypes.Array(h))], [(PROBS_NAME, datatypes.Array(n))], use_float_arraytype=True
    )
    builder.add_inner_product(
        DENSE_LAYER,
        W=np.asarray(weight, np.float32),
        b=np.asarray(bias, np.float32),
        input_channels=h,
        output_channels=n,
        has_bias=True,
        input_name=INPUT_NAME,
        output_name=LOGITS_NAME,
    )
    builder.add_softmax(SOFTMAX_LAYER, input_name=LOGITS_NAME, output_name=PROBS_NAME)
    builder.make_updatable([DENSE_LAYER])
    with contextlib.redirect_stdout(io.StringIO()):  # coremltools prints a note here
        builder.set_categorical_cross_entropy_loss(name=LOSS_LAYER, input=PROBS_NAME)
    lo, hi = training.learning_rate_range
    if training.optimizer == "adam":
        params = AdamParams(lr=training.learning_rate, batch=training.batch_size)
        params.set_lr(training.learning_rate, lo, hi)
        params.set_batch(training.batch_size, list(training.batch_sizes))
        builder.set_adam_optimizer(params)
    else:
        params = SgdParams(lr=training.learning_rate, batch=training.batch_size)
        params.set_lr(training.learning_rate, lo, hi)
        params.set_batch(training.batch_size, list(training.batch_sizes))
        builder.set_sgd_optimizer(params)
    builder.set_epochs(training.epochs, list(training.epochs_allowed))
    spec = builder.spec
    desc = spec.description
    desc.input[0].shortDescription = f"The encoder's pooled sentence embedding ({h} floats)"
    desc.output[0].shortDescription = f"Probabilities of the {n} labels, in the manifest's label order"
    for feature in desc.trainingInput:
        if feature.name == INPUT_NAME:
            feature.shortDescription = "Embedding of a corrected example"
        else:
            feature.shortDescription = "Index of the example's true label (Int32, shape [1])"
    return spec


def save_head(spec, path: Path, metadata: dict[str, str]) -> None:
    import coremltools as ct  # lazy: coremltools: ~4 s import, for conversion and checks only

    for key, value in metadata.items():
        spec.description.metadata.userDefined[key] = value
    ct.utils.save_spec(spec, str(path))


def load_head_spec(path: Path):
    from coremltools.proto import Model_pb2  # lazy: coremltools: ~4 s import, for conversion and checks only

    spec = Model_pb2.Model()
    spec.ParseFromString(Path(path).read_bytes())
    return spec


def describe_head(spec) -> dict:
    """What the head's spec says about training: read from the file, not from our intentions."""
    nn = spec.neuralNetwork
    layers = {layer.name: layer for layer in nn.layers}
    update = nn.updateParams
    losses = []
    for loss in update.lossLayers:
        kind = loss.WhichOneof("LossLayerType")
        body = getattr(loss, kind)
        losses.append({"name": loss.name, "type": kind, "input": body.input, "target": body.target})
    opt_kind = update.optimizer.WhichOneof("OptimizerType")
    optimizer = {"type": {"sgdOptimizer": "sgd", "adamOptimizer": "adam"}.get(opt_kind, opt_kind)}
    if opt_kind:
        opt = getattr(update.optimizer, opt_kind)
        optimizer["learning_rate"] = {
            "default": opt.learningRate.defaultValue,
            "min": opt.learningRate.range.minValue,
            "max": opt.learningRate.range.maxValue,
        }
        optimizer["mini_batch_size"] = {
            "default": int(opt.miniBatchSize.defaultValue),
            "allowed": [int(v) for v in opt.miniBatchSize.set.values],
        }
    return {
        "spec_version": int(spec.specificationVersion),
        "is_updatable": bool(spec.isUpdatable),
        "model_type": spec.WhichOneof("Type"),
        "layers": [
            {
                "name": layer.name,
                "type": layer.WhichOneof("layer"),
                "inputs": list(layer.input),
                "outputs": list(layer.output),
                "updatable": bool(layer.isUpdatable),
            }
            for layer in nn.layers
        ],
        "updatable_layers": [name for name, layer in layers.items() if layer.isUpdatable],
        "inputs": spec_features(spec, "input"),
        "outputs": spec_features(spec, "output"),
        "training_inputs": spec_features(spec, "trainingInput"),
        "losses": losses,
        "optimizer": optimizer,
        "epochs": {"default": int(update.epochs.defaultValue), "allowed": [int(v) for v in update.epochs.set.values]},
        "shuffle": bool(update.shuffle.defaultValue),
    }


def head_weights(spec) -> tuple[np.ndarray, np.ndarray]:
    """The innerProduct's weight (N, H) and bias (N,) as stored in the spec."""
    for layer in spec.neuralNetwork.layers:
        if layer.WhichOneof("layer") == "innerProduct":
            ip = layer.innerProduct
            w = np.array(ip.weights.floatValue, np.float32).reshape(ip.outputChannels, ip.inputChannels)
            b = np.array(ip.bias.floatValue, np.float32) if ip.hasBias else np.zeros(ip.outputChannels, np.float32)
            return w, b
    raise ValueError("the head has no innerProduct layer")
