"""A finished distillation's bundles in `mlx-edge serve`: the job page's bundle table (the recommended one
marked), one zip per kind at /jobs/<id>/download/<kind> for those who may see the job (its owner and the
admin; anyone else gets the 404 of a job that does not exist), the recommended one at /jobs/<id>/download,
and the ladder's boxes on the new-job form. In-process (Starlette's TestClient); the finished job is
seeded as the worker leaves one (result.json and its zips, made by the worker's own zip_bundles)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from starlette.testclient import TestClient

from mlx_edge.serve.app import create_app
from mlx_edge.serve.auth import add_user
from mlx_edge.serve.jobs import job_dir
from mlx_edge.serve.worker import RESULT_NAME, zip_bundles
from mlx_edge.settings import BUNDLE_KINDS
from tests.helpers.browser import csrf_of

PASSWORD = "a long enough password"
MADE = ("fp16", "int8", "static")  # the ladder this job asked for: no int4


def row(kind: str, path, dev: float, size: int, check: bool) -> dict:
    """A row of report["bundles"] as pipeline.final_report writes it."""
    return {
        "bundle": kind,
        "path": str(path),
        "student": str(path) + "-student",
        "kind": "bert 4x312" if kind != "static" else "static 32",
        "precision": {"fp16": "fp16", "int8": "int8-block64", "static": "fp16"}[kind],
        "bundle_bytes": size,
        "dev_accuracy": dev,
        "retained": dev / 0.95,
        "agreement": 0.97,
        "mirror_ms": 1.25,
        "mlx_ms": 0.5,
        "accuracy": {"dev": dev, "test": dev - 0.01},
        "check": check,
    }


def finish(workdir, job_id: int) -> None:
    """What the worker leaves for a done distillation: its bundles' zips and result.json."""
    directory = job_dir(workdir, job_id)
    rows = []
    for kind, dev, size in (("fp16", 0.93, 9_000_000), ("int8", 0.925, 4_000_000), ("static", 0.80, 600_000)):
        bundle = directory / "work" / ("bundle" if kind == "fp16" else f"bundle-{kind}")
        bundle.mkdir(parents=True)
        (bundle / "manifest.json").write_text(json.dumps({"kind": kind}))
        rows.append(row(kind, bundle, dev, size, check=True))
    files = {"Encoder.mlpackage": 8_000_000, "Head.mlmodel": 10_000}
    report = {
        "stages": [{"name": "export", "status": "ran", "seconds": 1.0, "output": "x"}],
        "accuracy": {"dev": {"teacher": 0.95, "student": 0.93}},
        "accuracy_by_language": {},
        "retained": {"dev": 0.93 / 0.95},
        "parameters": {"teacher": 117e6, "student": 14e6},
        "size_ratio": 8.4,
        "speedup": 6.0,
        "bundle": {"path": rows[0]["path"], "files": files},
        "bundles": rows,
        "recommended": "int8",
        "check": {"ok": True, "failed": []},
    }
    downloads = zip_bundles(report, directory)
    result = {"kind": "distill", "report": report, "text": "the report", "download": downloads["int8"]}
    (directory / RESULT_NAME).write_text(json.dumps({**result, "downloads": downloads}))


@pytest.fixture
def served(tmp_path):
    """An admin `root`, users `alice` (a done distillation of the ladder MADE) and `bob`."""
    app = create_app(tmp_path / "w", run_jobs=False)
    ids = {name: add_user(app.state.db, name, PASSWORD, admin=name == "root") for name in ("root", "alice", "bob")}
    params = {"data": "todo", "bundles": list(MADE)}
    job = app.state.db.add_job(user_id=ids["alice"], kind="distill", title="alice's ladder", params=params)
    finish(tmp_path / "w", job)
    app.state.db.update_job(job, status="done")
    return app, job


def login(app, name: str) -> tuple[TestClient, str]:
    client = TestClient(app)
    token = csrf_of(client.get("/login").text)
    data = {"csrf_token": token, "username": name, "password": PASSWORD}
    assert client.post("/login", data=data, follow_redirects=False).status_code == 303
    return client, csrf_of(client.get("/jobs/new").text)


def members(response) -> list[str]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    return zipfile.ZipFile(io.BytesIO(response.content)).namelist()


def test_the_owner_downloads_each_bundle_the_job_made(served):
    app, job = served
    alice, _ = login(app, "alice")
    for kind in MADE:
        response = alice.get(f"/jobs/{job}/download/{kind}")
        folder = "bundle" if kind == "fp16" else f"bundle-{kind}"
        assert members(response) == [f"{folder}/manifest.json"], kind
        assert f'filename="mlx-edge-job{job}-bundle-{kind}.zip"' in response.headers["content-disposition"]
    # the old URL still works, and serves the recommended bundle
    assert members(alice.get(f"/jobs/{job}/download")) == ["bundle-int8/manifest.json"]
    # a kind the job did not make, or none at all, is the 404 of a missing job
    for kind in ("int4", "int3", "result.json", "fp16.zip", "FP16"):
        assert alice.get(f"/jobs/{job}/download/{kind}").status_code == 404, kind
    assert alice.get(f"/jobs/{job}/download/..%2F{RESULT_NAME}").status_code == 404


def test_no_one_else_gets_a_bundle_but_the_admin(served):
    app, job = served
    bob, _ = login(app, "bob")
    for kind in (*MADE, "int4"):
        response = bob.get(f"/jobs/{job}/download/{kind}")
        assert response.status_code == 404 and "alice" not in response.text, kind
    assert bob.get(f"/jobs/{job}/download").status_code == 404
    assert bob.get(f"/jobs/{job + 1}/download/fp16").status_code == 404  # as for a job that does not exist
    root, _ = login(app, "root")
    assert members(root.get(f"/jobs/{job}/download/static")) == ["bundle-static/manifest.json"]
    stranger = TestClient(app)  # no session: 401, as the other downloads
    assert stranger.get(f"/jobs/{job}/download/fp16", follow_redirects=False).status_code == 401


def test_the_job_page_shows_the_bundle_table_with_the_recommended_one(served):
    app, job = served
    alice, _ = login(app, "alice")
    page = alice.get(f"/jobs/{job}").text
    table = page.split('id="bundles"')[1].split("</table>")[0]
    rows = table.split("<tr")[2:]
    assert [r.split('data-bundle="')[1].split('"')[0] for r in rows] == list(MADE)
    (recommended,) = [r for r in rows if 'id="recommended"' in r]
    assert 'data-bundle="int8"' in recommended and "int8-block64" in recommended
    assert "4.00" in recommended and "92.5%" in recommended and "91.5%" in recommended and "1.25" in recommended
    for kind in MADE:
        assert f'href="/jobs/{job}/download/{kind}"' in table
    assert "/download/int4" not in page and "Download the int8 bundle" in page
    assert "Head.mlmodel" in page.split('id="bundle"')[1]  # the first bundle's files


def test_the_form_offers_the_ladder_and_a_job_takes_the_ticked_kinds(served):
    app, _ = served
    bob, token = login(app, "bob")
    form = bob.get("/jobs/new").text
    box = '<input type="checkbox" name="bundles" value="{0}" id="bundles-{0}" '
    assert all(box.format(kind) + "checked>" in form for kind in BUNDLE_KINDS)  # every kind, ticked
    data = {"csrf_token": token, "kind": "distill", "data": "todo", "device": "cpu"}
    response = bob.post("/jobs", data={**data, "bundles": ["static", "fp16"]}, follow_redirects=False)
    assert response.status_code == 303, response.text
    job = int(response.headers["location"].rsplit("/", 1)[1])
    assert app.state.db.job(job)["params"]["bundles"] == ["fp16", "static"]
    default = bob.post("/jobs", data=data, follow_redirects=False)  # a script that sends no such field
    assert default.status_code == 303 and app.state.db.job(job + 1)["params"]["bundles"] == list(BUNDLE_KINDS)
    refused = bob.post("/jobs", data={**data, "bundles": ""})  # no box ticked: only the page's empty value
    assert refused.status_code == 400 and 'id="error-bundles"' in refused.text
    assert all(box.format(kind) + ">" in refused.text for kind in BUNDLE_KINDS)  # back as it was sent
