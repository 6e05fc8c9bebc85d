"""The pages that belong to one serve job: another user must get 404 from each (test_serve_security,
test_serve_attacks). A page added per job goes here, so both tests check it."""

from __future__ import annotations


def job_pages(job: str) -> list[str]:
    return [
        f"/jobs/{job}",
        f"/api/jobs/{job}",
        f"/jobs/{job}/log",
        f"/jobs/{job}/download",
        f"/jobs/{job}/download/fp16",
    ]
