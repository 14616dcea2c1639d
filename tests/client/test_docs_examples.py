"""Every example of docs/quickstart.md and docs/client.md, run against a real ``genworker up``.

The docs are what a newcomer types, so they are run as typed: each shell block (``console``, ``bash``,
and ``text`` transcripts whose lines start with ``$ ``) and each ``python`` block, in the order of the
page, in one shell per page whose PATH starts with the project's venv (what ``source
.venv/bin/activate`` gives), in a scratch directory holding the server's ``var/dev-api-key``. The one
change made to a command: the documented ``127.0.0.1:8000`` is the test server's port. Ids a page shows
(``gen_...``, ``wh_...``) are the ids of that page's own run, read from the output of the command that
printed them in the doc, so ``GEN=gen_52d4...`` follows the generation the test just created.

What is checked, per command: it exits 0, or with the code the doc prints (``exit=N``); and where the
doc shows its output whole (no ``...``, no ``<!-- docs-test: output abridged -->``), the run prints as
many lines. A python block followed by a transcript that runs ``python NAME.py`` is saved as NAME.py
for it. A block that cannot run here (``make up`` itself, installs, a receiver that serves forever)
carries ``<!-- docs-test: skip (reason) -->`` on the line above its fence; the test lists them, and a
page whose skipped blocks grow past what is counted here fails, so a skip is a decision in review.
"""

from __future__ import annotations

import re
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from genworker_client import Generation
from tests.client.conftest import Server

ROOT = Path(__file__).resolve().parents[2]
DOC_PORT = "127.0.0.1:8000"
COMMAND_TIMEOUT_S = 120.0

# The blocks each page may skip, with their reasons in the page; more fails (a new skip is reviewed here).
SKIPS_ALLOWED = {"docs/quickstart.md": 8, "docs/client.md": 4}

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!-- docs-test: (skip|output abridged) \((.+)\) -->\s*$")
_IDS = re.compile(r"\b(?:gen|wh)_[0-9a-f]{12,32}\b")
_EXIT = re.compile(r"^exit=(\d+)$", re.M)
_SAVED_AS = re.compile(r"^(?:time )?python3? (\w+\.py)$")
SHELLS = {"console", "bash", "sh", "shell", "text"}


@dataclass
class Block:
    lang: str
    line: int  # 1-based line of the opening fence
    body: list[str]
    skip: str | None = None
    abridged: bool = False


@dataclass
class Command:
    text: str
    output: list[str] = field(default_factory=list)  # what the doc shows after it
    line: int = 0


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    mark: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        marked = _MARK.match(lines[i])
        fence = _FENCE.match(lines[i])
        if marked:
            mark = (marked.group(1), marked.group(2))
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            block = Block(fence.group(1) or "text", i + 1, lines[i + 1 : end])
            if mark is not None:
                block.skip = mark[1] if mark[0] == "skip" else None
                block.abridged = mark[0] == "output abridged"
            found.append(block)
            mark = None
            i = end
        elif lines[i].strip():
            mark = None  # a mark belongs to the fence right below it
        i += 1
    return found


def _complete(command: str) -> bool:
    """Whether a shell command is whole: no open quote, no trailing backslash, no open $( or (."""
    if command.rstrip().endswith("\\"):
        return False  # bash -n reads a backslash at the end of its input as the end
    probe = subprocess.run(["bash", "-n"], input=command, capture_output=True, text=True, check=False)
    return probe.returncode == 0


def commands(block: Block) -> list[Command]:
    """The commands of a shell block: ``$ `` lines (with their continuation lines) and the output the doc
    shows after each; a block without prompts is one script."""
    if not any(line.startswith("$ ") for line in block.body):
        return [Command("\n".join(block.body), [], block.line)]
    found: list[Command] = []
    body = block.body
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("$ "):
            text = line[2:]
            start = i
            while not _complete(text) and i + 1 < len(body):
                i += 1
                text += "\n" + body[i]
            found.append(Command(text, [], block.line + 1 + start))
        elif found:
            found[-1].output.append(line)
        i += 1
    return found


class Shell:
    """One bash for a page: variables set by one command are there for the next."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.count = 0
        self.durations: list[tuple[float, str]] = []

    def run(self, command: str) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.count += 1
        started = time.monotonic()
        out = self.cwd / f".out-{self.count}"
        self.proc.stdin.write(f"{{ {command}\n}} > {out} 2>&1 < /dev/null; echo __done__ $?\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], deadline - time.monotonic())
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("__done__ "):
                    self.durations.append((time.monotonic() - started, command.splitlines()[0][:60]))
                    return int(line.split()[1]), out.read_text(errors="replace")
                if not line:
                    break
        shown = out.read_text(errors="replace")[-2000:] if out.exists() else "(no output)"
        pytest.fail(f"no end of {command!r} in {COMMAND_TIMEOUT_S:g} s: {shown}")

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def _ordered_ids(text: str) -> list[str]:
    return list(dict.fromkeys(_IDS.findall(text)))


def _lines(text: str) -> list[str]:
    """The lines that count: not blank, and one per run of lines that start alike (``running denoising
    0.25``, ``running denoising 0.5``: how many progress notes a job writes depends on the machine)."""
    kept: list[str] = []
    for line in text.splitlines():
        if line.strip() and not (kept and line.split()[:2] == kept[-1].split()[:2] and len(line.split()) > 2):
            kept.append(line)
    return kept


@pytest.mark.parametrize("page", sorted(SKIPS_ALLOWED))
def test_every_example_of_the_page_runs(page: str, server: Server, finished: Generation, tmp_path: Path) -> None:
    # `finished`: the worker has loaded the fast model, as every earlier client test leaves it, so the time
    # printed below is the examples' own.
    work = tmp_path / "newcomer"
    (work / "var").mkdir(parents=True)
    shutil.copy(server.data_dir / "dev-api-key", work / "var" / "dev-api-key")
    # The checkout's venv, where the docs say it is; the page's own `source .venv/bin/activate` puts it on
    # the PATH, which starts without it.
    (work / ".venv").symlink_to(Path(sys.prefix))
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": ":".join(filter(None, [str(ROOT), str(ROOT / "client" / "src")])),
        "LANG": "C.UTF-8",
    }
    shell = Shell(work, env)
    ids: dict[str, str] = {}  # the doc's id -> this run's
    skipped: list[str] = []
    ran = 0
    failures: list[str] = []
    pending_python: str | None = None
    page_blocks = blocks(ROOT / page)
    started = time.monotonic()
    try:
        for block in page_blocks:
            where = f"{page}:{block.line}"
            if block.skip is not None:
                skipped.append(f"{where} ({block.skip})")
                continue
            if block.lang == "python":
                pending_python = "\n".join(block.body)
                following = page_blocks[page_blocks.index(block) + 1 :]
                first = following[0] if following else None
                saved = _SAVED_AS.match(first.body[0].removeprefix("$ ")) if first and first.body else None
                if saved is None or not first.body[0].startswith("$ "):
                    (work / "example.py").write_text(_localize(pending_python, server, ids))
                    rc, out = shell.run("python example.py")
                    if rc != 0:
                        failures.append(f"{where}: the python block failed:\n{out[-3000:]}")
                    ran += 1
                    pending_python = None
                continue
            if block.lang not in SHELLS or (block.lang == "text" and not any(b.startswith("$ ") for b in block.body)):
                continue  # output shown alone (json, an error tree), not a command
            for command in commands(block):
                saved = _SAVED_AS.match(command.text)
                if saved and pending_python is not None:
                    (work / saved.group(1)).write_text(_localize(pending_python, server, ids))
                    pending_python = None
                rc, out = shell.run(_localize(command.text, server, ids))
                ran += 1
                failures += _check(f"{page}:{command.line}", command, block, rc, out)
                ids.update(zip(_ordered_ids("\n".join(command.output)), _ordered_ids(out), strict=False))
    finally:
        shell.close()
    took = time.monotonic() - started
    print(f"{page}: {ran} commands and python blocks ran in {took:.1f} s; {len(skipped)} blocks skipped:")
    print(*skipped, sep="\n  ")
    print("  slowest:", *[f"{s:.1f} s {c}" for s, c in sorted(shell.durations, reverse=True)[:5]], sep="\n    ")
    assert not failures, "\n\n".join(failures)
    assert ran >= 10
    assert len(skipped) <= SKIPS_ALLOWED[page], skipped


def _localize(text: str, server: Server, ids: dict[str, str]) -> str:
    text = text.replace(DOC_PORT, f"127.0.0.1:{server.port}")
    return _IDS.sub(lambda m: ids.get(m.group(0), m.group(0)), text)


def _check(where: str, command: Command, block: Block, rc: int, out: str) -> list[str]:
    """What is wrong with one command's run, as messages (none when it ran as the doc shows)."""
    shown = "\n".join(command.output)
    said = _EXIT.findall(shown)
    if said and _EXIT.findall(out) != said:
        return [f"{where}: {command.text!r} printed, where the doc says {said}:\n{out[-3000:]}"]
    if not said and rc != 0:
        return [f"{where}: {command.text!r} exited {rc}:\n{out[-3000:]}"]
    whole = command.output and not block.abridged and "..." not in shown and "…" not in shown
    if whole and len(_lines(out)) != len(_lines(shown)):
        return [f"{where}: {command.text!r}: the doc shows {len(_lines(shown))} lines, the run printed:\n{out[-3000:]}"]
    return []
