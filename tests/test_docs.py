"""The docs stay honest: every `mlx-edge ...` command and option that README.md, docs/ and swift/README.md
show exists, every relative link and #anchor resolves, every `benchmarks/` script they cite exists, and no
page narrates how the work was done. The checkers are tested on pages with a removed option, file or heading."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import click
import pytest

from mlx_edge.cli import main

ROOT = Path(__file__).resolve().parents[1]
NARRATION = re.compile(r"engineer|load average|other jobs|was wrong|earlier table", re.IGNORECASE)


def doc_files(root: Path = ROOT) -> list[Path]:
    """The pages a user reads: the README, docs/, the project files beside them and the Swift package's page."""
    named = [
        "README.md",
        "CHANGELOG.md",
        "THIRD_PARTY_NOTICES.md",
        "swift/README.md",
        "mlx_edge/datasets/todo/README.md",
    ]
    return [root / n for n in named if (root / n).exists()] + sorted((root / "docs").glob("*.md"))


def command_lines(text: str, cli: click.Group = main) -> list[tuple[click.Command, str, str]]:
    """(command, the flags part, the line) for each line that runs an mlx-edge command."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():  # continued shell lines joined
        match = re.search(r"mlx-edge\s+([a-z]+)(?:\s+([a-z]+))?([^`#|]*)", line)
        if not match or match.group(1) not in cli.commands:
            continue
        command, rest = cli.commands[match.group(1)], match.group(3) or ""
        subcommands = getattr(command, "commands", {})  # a click.Group's, or `augment adapt`
        if match.group(2) in subcommands:
            command = subcommands[match.group(2)]
        elif isinstance(command, click.Group):
            continue
        elif match.group(2):
            rest = f" {match.group(2)}{rest}"
        found.append((command, rest, line.strip()))
    return found


def unknown_flags(text: str, cli: click.Group = main) -> list[tuple[str, str]]:
    unknown = []
    for command, rest, line in command_lines(text, cli):
        options = {o for p in command.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
        options.add("--help")
        unknown += [(flag, line) for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest) if flag not in options]
    return unknown


def prose(text: str) -> str:
    """The text outside fenced code blocks (a `# comment` in a shell block is not a heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", prose(path.read_text(encoding="utf-8")), flags=re.MULTILINE):
        base = slug(heading)
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


def broken_links(files: list[Path]) -> list[str]:
    broken = []
    for page in files:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            name, _, anchor = target.partition("#")
            where = (page.parent / name).resolve() if name else page
            if not where.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def missing_scripts(files: list[Path], root: Path = ROOT) -> list[str]:
    cited = {(p.name, s) for p in files for s in re.findall(r"benchmarks/([A-Za-z0-9_]+\.py)", p.read_text("utf-8"))}
    return sorted(
        f"{page}: benchmarks/{script}" for page, script in cited if not (root / "benchmarks" / script).exists()
    )


def test_every_command_and_option_the_docs_show_exists():
    text = "\n".join(p.read_text(encoding="utf-8") for p in doc_files())
    assert len(command_lines(text)) >= 60  # every stage is shown somewhere
    assert unknown_flags(text) == []


def test_every_link_and_anchor_resolves():
    assert broken_links(doc_files()) == []


def test_every_cited_benchmark_script_exists():
    assert missing_scripts(doc_files()) == []


def test_no_page_narrates_how_the_work_was_done():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{p.name}: {m.group(0)}" for p in pages for m in NARRATION.finditer(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_readme_is_a_product_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 250
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.DOTALL).group(1)
    assert "bash scripts/setup.sh && .venv/bin/mlx-edge demo" in first_block and "bash scripts/test.sh" in first_block
    head = "\n".join(lines[:120])
    assert "Encoder.mlpackage" in head or "bundle" in head  # the quickstart reaches a bundle...
    assert "TextClassifier.open" in head  # ...and the Swift call within the first 120 lines


def test_a_removed_option_fails_the_check():
    """A docs line citing an option the CLI no longer has is reported (distill without --vocab-extra)."""
    distill = main.commands["distill"]
    assert any("--vocab-extra" in line for _, _, line in command_lines((ROOT / "docs" / "distill.md").read_text()))
    without = click.Command("distill", params=[p for p in distill.params if "--vocab-extra" not in p.opts])
    cli = click.Group("mlx-edge", commands={**main.commands, "distill": without})
    flagged = unknown_flags((ROOT / "docs" / "distill.md").read_text(encoding="utf-8"), cli)
    assert flagged and {flag for flag, _ in flagged} == {"--vocab-extra"}
    assert unknown_flags("mlx-edge export student --out b --no-such-option") == [
        ("--no-such-option", "mlx-edge export student --out b --no-such-option")
    ]


@pytest.fixture()
def docs_copy(tmp_path):
    for name in ("README.md", "docs", "swift/README.md", "benchmarks"):
        source = ROOT / name
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    return tmp_path


def test_a_removed_page_heading_or_script_fails_the_check(docs_copy):
    files = lambda: [docs_copy / "README.md", *sorted((docs_copy / "docs").glob("*.md"))]  # noqa: E731
    before = set(broken_links(files()))  # links into the repository outside the copy are broken from the start
    (docs_copy / "docs" / "serve.md").unlink()
    assert any("serve.md (no such file)" in b for b in set(broken_links(files())) - before)
    distill = docs_copy / "docs" / "distill.md"
    distill.write_text(distill.read_text(encoding="utf-8").replace("## Vocabulary pruning", "## Pruning"), "utf-8")
    assert any("#vocabulary-pruning (no such heading)" in b for b in set(broken_links(files())) - before)
    (docs_copy / "benchmarks" / "vocab_pruning.py").unlink()
    assert "distill.md: benchmarks/vocab_pruning.py" in missing_scripts(files(), docs_copy)


def test_every_config_the_docs_show_is_read_by_mlx_edge_run(tmp_path):
    """A TOML block on a page is a `mlx-edge run` config: unknown keys or values out of range would fail here."""
    from mlx_edge.pipeline import PipelineConfig, stage_settings

    blocks = [
        b for p in doc_files() for b in re.findall(r"```toml\n(.*?)```", p.read_text(encoding="utf-8"), re.DOTALL)
    ]
    assert len(blocks) >= 2  # the README's quickstart and the pipeline page
    for i, block in enumerate(blocks):
        folder = tmp_path / str(i)
        folder.mkdir()
        for name in re.findall(r'^(?:train|dev|test) = "([^"]+)"', block, flags=re.MULTILINE):
            (folder / name).write_text("text,label\nhello,a\nworld,b\n", encoding="utf-8")
        (folder / "run.toml").write_text(block, encoding="utf-8")
        config = PipelineConfig.from_toml(folder / "run.toml")
        assert config.train.parent == folder
        assert stage_settings(config, "distill").init in ("auto", "teacher")  # never a weaker init than the demo's
