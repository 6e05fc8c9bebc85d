"""Checks of the updatable head: its spec as MLUpdateTask will read it, and a NumPy run of what
MLUpdateTask does with it (mini-batch SGD or Adam on the innerProduct, cross-entropy on the softmax)."""

from __future__ import annotations

import numpy as np

from bridges.checks import CheckResult


def check_head_spec(info: dict, entry: dict) -> list[CheckResult]:
    """`info` from `describe_head(spec)`; `entry` the manifest's head entry."""
    results = []
    layers = {layer["name"]: layer for layer in info["layers"]}

    problems = []
    if not info["is_updatable"]:
        problems.append("isUpdatable is false")
    if info["spec_version"] < 4:
        problems.append(f"spec version {info['spec_version']} < 4 (updatable models need Core ML 3)")
    if info["model_type"] != "neuralNetwork":
        problems.append(f"model type {info['model_type']} (updatable needs a plain neuralNetwork here)")
    updatable = info["updatable_layers"]
    if not updatable:
        problems.append("no layer is updatable")
    for name in updatable:
        if layers[name]["type"] not in ("innerProduct", "convolution"):
            problems.append(f"layer {name} ({layers[name]['type']}) cannot be updatable")
    if updatable != entry.get("updatable_layers"):
        problems.append(f"updatable layers {updatable} != manifest {entry.get('updatable_layers')}")
    results.append(
        CheckResult(
            "head.updatable",
            not problems,
            "; ".join(problems)
            or f"isUpdatable, spec v{info['spec_version']}, updatable layer(s) {', '.join(updatable)}",
        )
    )

    # The loss must read a plain softmax layer's output, which is the head's probabilities output.
    problems = []
    losses = info["losses"]
    expected = entry.get("loss", {})
    if len(losses) != 1 or losses[0]["type"] != "categoricalCrossEntropyLossLayer":
        problems.append(f"expected one categorical cross-entropy loss, found {[l['type'] for l in losses]}")
    else:
        loss = losses[0]
        producer = next((l for l in info["layers"] if loss["input"] in l["outputs"]), None)
        if producer is None:
            problems.append(f"loss input {loss['input']!r} is not produced by any layer")
        elif producer["type"] != "softmax":
            problems.append(
                f"loss input {loss['input']!r} comes from layer {producer['name']!r} "
                f"({producer['type']}), not a softmax"
            )
        if loss["input"] != entry.get("probabilities_output"):
            problems.append(
                f"loss input {loss['input']!r} is not the probabilities output {entry.get('probabilities_output')!r}"
            )
        if loss["input"] != expected.get("input") or loss["target"] != expected.get("target"):
            problems.append(
                f"loss {loss['input']} -> {loss['target']} != manifest "
                f"{expected.get('input')} -> {expected.get('target')}"
            )
        training = [f["name"] for f in info["training_inputs"]]
        if loss["target"] not in training:
            problems.append(f"loss target {loss['target']!r} is not a training input ({training})")
    results.append(
        CheckResult(
            "head.loss",
            not problems,
            "; ".join(problems)
            or f"categorical cross-entropy on softmax output {losses[0]['input']!r}, target {losses[0]['target']!r}",
        )
    )

    # Optimizer and epochs: present, defaults inside their allowed ranges, as the manifest says.
    problems = []
    opt, want = info["optimizer"], entry.get("optimizer", {})
    if opt.get("type") not in ("sgd", "adam"):
        problems.append(f"no SGD/Adam optimizer ({opt.get('type')})")
    else:
        lr, batch = opt["learning_rate"], opt["mini_batch_size"]
        if not lr["min"] <= lr["default"] <= lr["max"] or lr["default"] <= 0:
            problems.append(f"learning rate {lr['default']} outside [{lr['min']}, {lr['max']}]")
        if batch["default"] not in batch["allowed"]:
            problems.append(f"mini-batch size {batch['default']} not in {batch['allowed']}")
        for key in ("type", "learning_rate", "mini_batch_size"):
            if want.get(key) != opt.get(key):
                problems.append(f"optimizer {key} {opt.get(key)} != manifest {want.get(key)}")
    epochs = info["epochs"]
    if epochs["default"] < 1 or epochs["default"] not in epochs["allowed"]:
        problems.append(f"epochs {epochs['default']} not in the allowed set")
    if entry.get("epochs") != epochs:
        problems.append("epochs differ from the manifest")
    results.append(
        CheckResult(
            "head.optimizer",
            not problems,
            "; ".join(problems)
            or f"{opt['type']} lr {opt['learning_rate']['default']:g}, mini-batch "
            f"{opt['mini_batch_size']['default']}, {epochs['default']} epochs",
        )
    )
    return results


def simulate_update(
    w: np.ndarray,
    b: np.ndarray,
    embeddings: np.ndarray,
    targets: np.ndarray,
    *,
    optimizer: dict,
    epochs: int,
    seed: int = 0,
) -> dict:
    """What MLUpdateTask does: shuffled mini-batches, mean cross-entropy, SGD (momentum) or Adam.

    Returns the loss and the predicted classes before and after each epoch, and the final weights.
    """
    w, b = np.array(w, np.float64), np.array(b, np.float64)
    x, y = np.asarray(embeddings, np.float64), np.asarray(targets, np.int64)
    lr = optimizer["learning_rate"]["default"]
    batch = optimizer["mini_batch_size"]["default"]
    adam = optimizer["type"] == "adam"
    beta1, beta2, eps, momentum = 0.9, 0.999, 1e-8, 0.0
    state = [np.zeros_like(w), np.zeros_like(b), np.zeros_like(w), np.zeros_like(b)]
    rng = np.random.default_rng(seed)
    step = 0

    def loss_of(w, b):
        p = _softmax(x @ w.T + b)
        return float(-np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)))

    losses, predictions = [loss_of(w, b)], [np.argmax(x @ w.T + b, axis=1)]
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y), batch):
            idx = order[start : start + batch]
            p = _softmax(x[idx] @ w.T + b)
            p[np.arange(len(idx)), y[idx]] -= 1.0  # d(mean CE)/d(logits)
            gw, gb = p.T @ x[idx] / len(idx), p.mean(axis=0)
            step += 1
            if adam:
                for i, g in ((0, gw), (1, gb)):
                    state[i] = beta1 * state[i] + (1 - beta1) * g
                    state[i + 2] = beta2 * state[i + 2] + (1 - beta2) * g * g
                m_hat, v_hat = state[0] / (1 - beta1**step), state[2] / (1 - beta2**step)
                w -= lr * m_hat / (np.sqrt(v_hat) + eps)
                m_hat, v_hat = state[1] / (1 - beta1**step), state[3] / (1 - beta2**step)
                b -= lr * m_hat / (np.sqrt(v_hat) + eps)
            else:
                state[0] = momentum * state[0] + gw
                state[1] = momentum * state[1] + gb
                w -= lr * state[0]
                b -= lr * state[1]
        losses.append(loss_of(w, b))
        predictions.append(np.argmax(x @ w.T + b, axis=1))
    return {"losses": losses, "predictions": predictions, "w": w, "b": b}


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def check_update(info: dict, w: np.ndarray, b: np.ndarray, embeddings: np.ndarray, labels: list[str]) -> CheckResult:
    """The user corrects every example to the label the head now finds least likely (one label, so
    that any set of real embeddings is learnable by a linear head): with the head's default
    learning rate and mini-batch size the loss must fall within the default epochs, and every
    example must flip to its new label within the allowed epochs."""
    if info["optimizer"].get("type") not in ("sgd", "adam"):
        return CheckResult("head.update", False, "no optimizer to simulate")
    least_likely = int(np.argmin(_softmax(embeddings @ w.T + b).mean(axis=0)))
    targets = np.full(len(embeddings), least_likely)
    default_epochs = info["epochs"]["default"]
    max_epochs = max(info["epochs"]["allowed"])
    run = simulate_update(w, b, embeddings, targets, optimizer=info["optimizer"], epochs=max_epochs)
    losses = run["losses"]
    flipped_at = next((e for e, p in enumerate(run["predictions"]) if e and np.array_equal(p, targets)), None)
    flipped = int(np.sum(run["predictions"][flipped_at or -1] == targets))
    loss_default = losses[min(default_epochs, len(losses) - 1)]
    figures = {
        "examples": len(targets),
        "loss_before": losses[0],
        "loss_after_default_epochs": loss_default,
        "default_epochs": default_epochs,
        "epochs_to_flip_all": flipped_at,
        "flipped": flipped,
        "learning_rate": info["optimizer"]["learning_rate"]["default"],
        "mini_batch_size": info["optimizer"]["mini_batch_size"]["default"],
    }
    ok = loss_default < losses[0] and flipped_at is not None
    detail = (
        f"{len(targets)} corrections: loss {losses[0]:.3f} -> {loss_default:.3f} after {default_epochs} epochs; "
        + (
            f"all flipped to their new labels after {flipped_at} epoch(s)"
            if flipped_at
            else f"only {flipped}/{len(targets)} flipped within {max_epochs} epochs"
        )
    )
    return CheckResult("head.update", ok, detail, figures)
