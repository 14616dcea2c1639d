"""Every example of README.md, docs/quickstart.md, docs/client.md and docs/adding-a-pipeline.md, run against a
real ``genworker up``.

The docs are what a newcomer types, so they are run as typed: each shell block (``console``, ``bash``,
and ``text`` transcripts whose lines start with ``$ ``) and each ``python`` block, in the order of the
page, in one shell per page whose PATH starts with the project's venv (what ``source
.venv/bin/activate`` gives), in a scratch directory holding the server's ``var/dev-api-key``. The one
change made to a command: the documented ``127.0.0.1:8000`` is the test server's port. The scratch directory's
``var`` is the server's data directory, as a checkout's ``var`` is for ``make up``, so ``genworker webhooks
add`` registers with the running service; the server runs with the allow-lists the quickstart starts it with.
Ids a page shows (``gen_...``, ``wh_...``) are the ids of that page's own run, read from the output of the command that
printed them in the doc, so ``GEN=gen_52d4...`` follows the generation the test just created.

What is checked, per command: it exits 0, or with the code the doc prints (``exit=N``); and where the
doc shows its output whole (no ``...``, no ``<!-- docs-test: output abridged -->``), the run prints as
many lines. A python block followed by a transcript that runs ``python NAME.py`` is saved as NAME.py
for it. A block that cannot run here (``make up`` itself, installs, a receiver that serves forever)
carries ``<!-- docs-test: skip (reason) -->`` on the line above its fence; the test lists them, and a
page whose skipped blocks grow past what is counted here fails, so a skip is a decision in review. A block
that serves until stopped (an image server, a webhook receiver) carries ``<!-- docs-test: background (serves
http://127.0.0.1:PORT ...) -->``: its commands run in the background, the page goes on once PORT accepts
connections, and they are stopped when the page ends; what they print is not checked.
"""

from __future__ import annotations

import re
import select
import socket
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
SKIPS_ALLOWED = {"README.md": 1, "docs/quickstart.md": 3, "docs/client.md": 3, "docs/adding-a-pipeline.md": 2}
# The fewest commands a page runs: a page whose blocks silently stop running fails.
RUNS_AT_LEAST = {"README.md": 3, "docs/quickstart.md": 10, "docs/client.md": 10, "docs/adding-a-pipeline.md": 1}
BACKGROUND_START_S = 30.0
ACTIVATE = "source .venv/bin/activate"

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!-- docs-test: (skip|output abridged|background) \((.+)\) -->\s*$")
_SERVES = re.compile(r"127\.0\.0\.1:(\d+)")
_IDS = re.compile(r"\b(?:gen|wh)_[0-9a-f]{12,32}\b")
_EXIT = re.compile(r"^exit=(\d+)$", re.M)
# ``python NAME.py``, maybe timed or with variables set for it (``WEBHOOK_SECRET=$(cat secret.txt) python3 r.py``).
_SAVED_AS = re.compile(r"^(?:time )?(?:[A-Z_]+=(?:\$\([^)]*\)|\S+) )*python3? (\w+\.py)$")
SHELLS = {"console", "bash", "sh", "shell", "text"}


@dataclass
class Block:
    lang: str
    line: int  # 1-based line of the opening fence
    body: list[str]
    skip: str | None = None
    abridged: bool = False
    background: str | None = None  # the mark's text: it names the port the block serves


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
                block.background = mark[1] if mark[0] == "background" else None
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
        self.background: list[int] = []  # pids of the subshells started in the background

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

    def start(self, command: str, port: int) -> None:
        """``command`` in the background (the shell's variables seen), until the page ends; returns once
        ``port`` on loopback accepts connections."""
        log_file = self.cwd / f".background-{len(self.background)}"
        rc, out = self.run(f"{{ {command}\n}} > {log_file.name} 2>&1 < /dev/null &\necho $!")
        assert rc == 0, out
        self.background.append(int(out.split()[-1]))
        deadline = time.monotonic() + BACKGROUND_START_S
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        log = log_file.read_text(errors="replace")[-2000:]
        pytest.fail(f"{command!r} did not serve port {port} within {BACKGROUND_START_S:g} s: {log}")

    def stop_background(self) -> None:
        """Stop what ``start`` started: each subshell's children, then the subshell (by their pids)."""
        for pid in self.background:
            self.run(f"pkill -TERM -P {pid}; kill {pid} 2>/dev/null; wait {pid} 2>/dev/null; true")
        self.background.clear()

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stop_background()
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
    work.mkdir()
    (work / "var").symlink_to(server.data_dir)  # a checkout's var/ is the data dir of its `make up`
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
    if ACTIVATE in (ROOT / page).read_text():
        shell.run(ACTIVATE)  # the page tells its reader to activate the venv once per shell (its note)
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
            if block.background is not None:
                served = _SERVES.search(block.background)
                assert served, f"{where}: a background mark names the port it serves (127.0.0.1:PORT)"
                for command in commands(block):
                    saved = _SAVED_AS.match(command.text)
                    if saved and pending_python is not None:
                        (work / saved.group(1)).write_text(_localize(pending_python, server, ids))
                        pending_python = None
                    shell.start(_localize(command.text, server, ids), int(served.group(1)))
                    ran += 1
                continue
            if block.lang == "python":
                pending_python = "\n".join(block.body)
                if not _saved_later(page_blocks, page_blocks.index(block)):
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
    assert ran >= RUNS_AT_LEAST[page], ran
    assert len(skipped) <= SKIPS_ALLOWED[page], skipped


def _saved_later(page_blocks: list[Block], index: int) -> bool:
    """Whether a command after the python block at ``index``, before the next python block, runs it as a file
    (``python NAME.py``): it is saved for that command then, not run on its own."""
    for block in page_blocks[index + 1 :]:
        if block.lang == "python":
            return False
        prompted = block.skip is None and block.lang in SHELLS and any(line.startswith("$ ") for line in block.body)
        if prompted and any(_SAVED_AS.match(command.text) for command in commands(block)):
            return True
    return False


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
