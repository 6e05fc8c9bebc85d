"""`mlx-edge serve` end to end in a real headless chromium: log in, upload to-do rows, start a
distillation, watch the live view update, see it finish, download the bundle, `mlx-edge check` it.

The server is a real `python -m mlx_edge serve` process; the teacher is a tiny random BERT with a
vocabulary learned on the to-do texts (built here), the student a 1-layer micro config, so the whole
job takes seconds per stage. A screenshot of the finished job page is saved to $MLX_EDGE_ARTIFACTS
(or the test's tmp dir); docs/serve-job.png is a copy of one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from mlx_edge.settings import BUNDLE_KINDS
from tests.helpers.browser import (
    PASSWORD,
    ROOT,
    Server,
    build_todo_teacher,
    distill_form,
    find_chromium,
    headless_chromium,
    micro_student,
    todo_rows,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    find_chromium() is None,
    reason="needs Debian's chromium and chromium-driver (scripts/setup.sh installs them on Linux)",
)


@pytest.fixture
def browser(tmp_path):
    driver = headless_chromium(tmp_path / "downloads")
    yield driver
    driver.quit()


def test_login_upload_run_watch_download_check(tmp_path, browser):
    from selenium.webdriver.common.by import By

    teacher = build_todo_teacher(tmp_path / "teacher")
    student = micro_student(tmp_path / "student.json")
    train, dev = tmp_path / "todo-train.jsonl", tmp_path / "todo-dev.jsonl"
    train.write_text("\n".join(todo_rows("train", 900)) + "\n", encoding="utf-8")
    dev.write_text("\n".join(todo_rows("dev", 150)) + "\n", encoding="utf-8")
    server = Server(tmp_path / "work", args=("--models", str(tmp_path))).start()
    try:
        # every page needs a session: the jobs page sends the browser to the login form
        browser.get(server.url + "/")
        assert browser.current_url.endswith("/login")
        browser.find_element(By.ID, "username").send_keys("admin")
        browser.find_element(By.ID, "password").send_keys(PASSWORD)
        browser.find_element(By.ID, "login").click()
        wait_for(lambda: browser.current_url == server.url + "/", 10, "the jobs page after login")

        browser.get(server.url + "/jobs/new")
        browser.find_element(By.ID, "data-upload").click()
        browser.find_element(By.ID, "train_file").send_keys(str(train))
        browser.find_element(By.ID, "dev_file").send_keys(str(dev))
        form = distill_form(teacher, student)
        for name, value in form.items():
            if name in ("kind", "data", "device", "bundles"):
                continue
            box = browser.find_element(By.ID, name)
            box.clear()
            box.send_keys(str(value))
        for kind in BUNDLE_KINDS:  # every kind starts ticked: untick those the form leaves out
            if kind not in form["bundles"]:
                browser.find_element(By.ID, f"bundles-{kind}").click()
        browser.find_element(By.ID, "start").click()
        wait_for(lambda: "/jobs/1" in browser.current_url, 15, "the job page")

        # live: progress values change on the same page (a marker set now would vanish on a reload)
        browser.execute_script("window.notReloaded = true")
        seen = set()

        def progressed():
            state = browser.execute_script(
                "return [window.notReloaded === true, document.getElementById('status').textContent,"
                " document.getElementById('progress').value, document.getElementById('detail').textContent]"
            )
            if state[0] and state[1] == "running":
                seen.add((round(state[2], 4), state[3]))
            return len(seen) >= 3

        wait_for(progressed, 240, "three live progress updates while the job runs")
        assert browser.find_element(By.ID, "stat-device").text.startswith("teacher: PyTorch cpu")

        wait_for(lambda: _text(browser, "status") == "done", 300, "the job to finish")
        wait_for(lambda: _text(browser, "check") == "check PASSED", 15, "the finished page's report")
        assert browser.find_element(By.CSS_SELECTOR, "#accuracy tbody tr")
        assert "Head.mlmodel" in browser.find_element(By.ID, "bundle").text
        assert browser.find_element(By.ID, "recommended").text == "recommended"  # the one bundle made
        assert browser.find_element(By.ID, "download-fp16").get_attribute("href").endswith("/download/fp16")
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#charts figure"), 15, "the curves")
        assert "MB resident" in browser.find_element(By.ID, "stat-memory").text
        _screenshot(browser, tmp_path)

        browser.find_element(By.ID, "download").click()
        downloads = tmp_path / "downloads"
        archive = wait_for(lambda: next(downloads.glob("*.zip"), None), 30, "the downloaded bundle")
        time.sleep(0.5)  # chromium renames the finished file into place; let it close it
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp_path / "unzipped")
        bundle = tmp_path / "unzipped" / "bundle"
        check = subprocess.run(
            [sys.executable, "-m", "mlx_edge", "check", str(bundle)], cwd=ROOT, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert " 0 failed" in check.stdout  # `check` exits 11 when any check fails
    finally:
        server.stop()


def _text(browser, element_id: str) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return browser.find_element(By.ID, element_id).text
    except (NoSuchElementException, StaleElementReferenceException):  # the page is reloading
        return ""


def _screenshot(browser, tmp_path: Path) -> Path:
    """The whole job page as PNG, in $MLX_EDGE_ARTIFACTS (CI keeps it) or the test's tmp dir."""
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(max(height + 120, 900), 4000))
    out = Path(os.environ.get("MLX_EDGE_ARTIFACTS") or tmp_path) / "serve-job.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(out)), out
    return out
