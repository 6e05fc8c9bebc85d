"""The served app in tests: a real `mlx-edge serve` process, an HTTP client logged in the way a browser
logs in (CSRF token from the form), a headless Debian chromium, and the tiny models its jobs train.

Nothing is downloaded: chromium and chromedriver are Debian's (scripts/setup.sh installs them), and
Selenium Manager is kept offline (the driver's path is given).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-for-tests"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER = ("/usr/bin/chromedriver",)
MICRO_STUDENT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m mlx_edge serve` on a free loopback port; start(), stop() (SIGINT), kill() (SIGKILL)."""

    def __init__(self, workdir: Path, port: int | None = None, args: tuple[str, ...] = ()):
        self.workdir, self.port, self.args = Path(workdir), port or free_port(), tuple(args)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> Server:
        import httpx

        # One OpenMP thread: on two cores shared with other processes, PyTorch's spinning threads made the
        # tiny teacher's training 20x slower here (22 vs 466 samples/s).
        env = {**os.environ, "MLX_EDGE_ADMIN_PASSWORD": PASSWORD, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        log = open(self.workdir.parent / f"server-{self.port}.log", "ab")  # noqa: SIM115 (the process keeps it)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlx_edge",
                "serve",
                "--workdir",
                str(self.workdir),
                "--port",
                str(self.port),
                *self.args,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(self.url + "/login", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server did not answer in {timeout} s: {self.log()}")

    def log(self) -> str:
        path = self.workdir.parent / f"server-{self.port}.log"
        return path.read_text(errors="replace")[-3000:] if path.is_file() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def login(url: str, user: str = "admin", password: str = PASSWORD):
    """An httpx client with a logged-in session, and the session's CSRF token."""
    import httpx

    client = httpx.Client(base_url=url, timeout=30)
    token = csrf_of(client.get("/login").text)
    response = client.post("/login", data={"csrf_token": token, "username": user, "password": password})
    assert response.status_code == 303, response.text
    return client, csrf_of(client.get("/jobs/new").text)


def wait_for(check, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def todo_rows(split: str, n: int) -> list[str]:
    """The first `n` lines of a split of the shipped to-do data (it is shuffled: every label is there)."""
    from mlx_edge.datasets import todo_split

    return todo_split(split).read_text(encoding="utf-8").splitlines()[:n]


def build_todo_teacher(directory: Path, *, min_count: int = 3) -> Path:
    """A bare random tiny BERT (as a pretrained checkpoint would be) whose WordPiece vocabulary covers the
    to-do training texts, so a short fine-tuning learns something. The vocabulary is made here, sorted
    (every character, alone and as "##" suffix, and each word seen `min_count` times): the tokenizers
    trainer breaks frequency ties in a different order from one process to the next."""
    from collections import Counter

    import torch
    from tokenizers import normalizers, pre_tokenizers
    from transformers import BertModel, BertTokenizerFast

    from tests.helpers.tiny import tiny_bert_config

    directory.mkdir(parents=True, exist_ok=True)
    normalize, split = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words = Counter(
        word
        for line in todo_rows("train", 3000)
        for word, _ in split.pre_tokenize_str(normalize.normalize_str(json.loads(line)["text"]))
    )
    chars = sorted({c for word in words for c in word})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    vocab += sorted(w for w, n in words.items() if n >= min_count and len(w) > 1)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=True).save_pretrained(directory)
    torch.manual_seed(0)
    BertModel(tiny_bert_config(len(vocab))).save_pretrained(directory)
    return directory


def micro_student(path: Path) -> Path:
    path.write_text(json.dumps(MICRO_STUDENT), encoding="utf-8")
    return path


def distill_form(teacher: Path, student: Path, **overrides) -> dict:
    """A distillation job small enough for a test: seconds per stage on two CPU cores."""
    form = {
        "kind": "distill",
        "data": "upload",
        "teacher": str(teacher),
        "distill_student": str(student),
        "teacher_epochs": "6",
        "distill_epochs": "6",
        "teacher_max_length": "32",
        "teacher_learning_rate": "5e-3",
        "distill_learning_rate": "5e-3",
        "device": "cpu",
        "bundles": ["fp16"],  # the ladder's first rung only: the other kinds are tested in test_ladder.py
        "teacher_edits": "0",  # auto would make a transfer set of a few-row upload: minutes, not seconds
        "broad_text": "0",
    }
    return {**form, **overrides}


def find_chromium() -> tuple[str, str] | None:
    browser = next((p for p in CHROMIUM if Path(p).is_file()), None) or shutil.which("chromium")
    driver = next((p for p in CHROMEDRIVER if Path(p).is_file()), None) or shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def headless_chromium(download_dir: Path):
    """Selenium driving Debian's chromium, headless, downloads into `download_dir`; no Selenium Manager."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a browser or driver
    browser, driver = find_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1500",
    ):
        options.add_argument(flag)
    options.add_experimental_option(
        "prefs", {"download.default_directory": str(download_dir), "download.prompt_for_download": False}
    )
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)
