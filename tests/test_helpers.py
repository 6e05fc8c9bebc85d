"""The shared helpers themselves: each export test leans on them building one student, once."""

from __future__ import annotations

from tests.helpers.exports import tiny_student


def test_helpers_build_one_student_once():
    assert tiny_student() is tiny_student()
    assert (tiny_student() / "config.json").is_file()
