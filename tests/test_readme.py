"""The README as a newcomer reads it: every link and anchor resolves, the picture is there and small, and
the "your own data and your own key" quickstart runs as written (the provider's base URL pointed at the
emulator) and prints exactly the `Policy.decide` output the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import ROOT, dataset_path

README = ROOT / "README.md"
TOPICS = ["card_arrival", "lost_or_stolen_card", "pin_blocked", "exchange_rate"]


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def github_anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _without_code(text), flags=re.M):
        base = github_anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", _without_code(text))


def test_every_link_and_anchor_of_the_readme_resolves():
    text = _text()
    ids = anchors(text)
    found = links(text)
    assert len(found) > 30  # the contents list is there
    for target in found:
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        if path:
            assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor and not path:
            assert anchor in ids, f"README links to #{anchor}; headings give {sorted(ids)}"


def test_the_contents_list_names_every_section():
    text = _text()
    contents = text[text.index("## Contents") : text.index("## Install")]
    for heading in re.findall(r"^## (.+)$", _without_code(text), flags=re.M):
        if heading != "Contents":
            assert f"(#{github_anchor(heading)})" in contents, heading


def test_the_screenshot_is_a_small_png():
    (image,) = [t for t in links(_text()) if t.endswith(".png")]
    data = (ROOT / image).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) <= 300 * 1024, f"{image} is {len(data) // 1024} KB"


def _block(lang: str, must: str) -> str:
    (block,) = [b for b in re.findall(rf"```{lang}\n(.*?)```", _text(), flags=re.S) if must in b]
    return block


@pytest.mark.slow
def test_the_quickstart_runs_and_decide_prints_what_the_readme_shows(tmp_path):
    from workbench.emulator import run_emulator

    # tickets.csv: the BANKING77 messages of the schema's four topics
    frames = [pd.read_csv(dataset_path("banking77", f"{f}.csv")) for f in ("train", "test")]
    df = pd.concat(frames, ignore_index=True)
    df = df[df.category.isin(TOPICS)].reset_index(drop=True)
    df.insert(0, "id", [f"t{i:04d}" for i in range(len(df))])
    df.rename(columns={"category": "topic"}).to_csv(tmp_path / "tickets.csv", index=False)
    assert len(df) == 622  # what the README says
    schema = _block("yaml", "# tickets.yaml")
    (tmp_path / "tickets.yaml").write_text(schema, encoding="utf-8")
    commands = _block("bash", "RUN=$(workbench run --dataset tickets")
    assert len(commands.strip().splitlines()) == 7  # six steps, the import on two lines
    script = "\n".join(x for x in commands.splitlines() if not x.startswith("export "))  # the key: below
    bindir = tmp_path / ".bin"  # `workbench` resolves to the checkout under test
    bindir.mkdir()
    (bindir / "workbench").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "from workbench.cli import main; main()" "$@"\n'
    )
    (bindir / "workbench").chmod(0o755)
    with run_emulator(port=0) as emu:
        env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_DB"}
        env.update(
            PATH=f"{bindir}:{os.environ['PATH']}",
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "runtime"), os.environ.get("PYTHONPATH", "")]),
            CLOUDFLARE_CLEF_BASE_URL=emu.cloudflare_base_url,
            CLOUDFLARE_API_KEY="dummy",
            CLOUDFLARE_ACCOUNT_ID="0123456789abcdef0123456789abcdef",
        )
        proc = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CERTIFIED" in proc.stdout
    assert (tmp_path / "policy.json").is_file()
    decide = subprocess.run(
        [sys.executable, "-c", _block("python", "policy.decide(response)")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert decide.returncode == 0, decide.stderr
    assert decide.stdout.strip() == _block("text", '"question": "topic"').strip()
