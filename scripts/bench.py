"""`make bench`: run every benchmark, write bench/results.json and render docs/benchmarks.md.

Each section lives in its own module (`scripts/bench_<name>.py`, a `run(quick: bool) -> dict`) and runs
in a fresh subprocess, so imports, caches and memory of one section never leak into another and one
failing section is reported without losing the rest. Every figure is printed next to the baseline
measured in the same run: these machines are noisy, so compare ratios and medians, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_report import render_report  # noqa: E402

SECTIONS: dict[str, str] = {
    "queue": "scripts.bench_queue",
    "pipelines": "scripts.bench_pipelines",
    "media": "scripts.bench_media",
    "worker": "scripts.bench_worker",
    "api": "scripts.bench_api",
    "scale": "scripts.bench_scale",
}

_RUNNER = """
import json, sys
sys.path.insert(0, {root!r})
from importlib import import_module
module = import_module({module!r})
kwargs = {{"quick": {quick!r}}}
if {gpu!r}:
    kwargs["gpu"] = True
result = module.run(**kwargs)
with open({out!r}, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2, default=str)
"""


def run_section(name: str, module: str, *, quick: bool, gpu: bool, workdir: Path, timeout_s: float) -> dict[str, Any]:
    out = workdir / f"{name}.json"
    code = _RUNNER.format(root=str(ROOT), module=module, quick=quick, gpu=gpu, out=str(out))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            check=False,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"error": f"exit {proc.returncode}", "stderr_tail": tail, "wall_s": round(elapsed, 1)}
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    result.setdefault("wall_s", round(elapsed, 1))
    return result


def machine() -> dict[str, Any]:
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (under 3 minutes in all)")
    parser.add_argument("--gpu", action="store_true", help="real models on a GPU node (sections that support it)")
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="run only these sections")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.json"))
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per section")
    args = parser.parse_args()

    out = Path(args.out)
    workdir = out.parent / "sections"
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "make bench" + (" (--quick)" if args.quick else ""),
        "quick": args.quick,
        "machine": machine(),
        "sections": {},
    }
    for name in args.only or SECTIONS:
        print(f"[bench] {name} ...", flush=True)
        section = run_section(
            name, SECTIONS[name], quick=args.quick, gpu=args.gpu, workdir=workdir, timeout_s=args.timeout
        )
        results["sections"][name] = section
        status = "FAILED: " + section["error"] if "error" in section else f"done in {section.get('wall_s')} s"
        print(f"[bench] {name} {status}", flush=True)
    out.write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    render_report(results, docs_path=Path(args.docs), charts_dir=Path(args.docs).parent / "bench")
    print(f"[bench] wrote {out} and {args.docs}")


if __name__ == "__main__":
    main()
