"""``make device-bundle``: the wheels a lent GPU machine needs for ``bench_gpu.py --random-weights``, and the
one command that installs them there and runs it.

The GPU machines come with Python 3.12, torch 2.11 (CUDA 13), transformers 5.17, accelerate 1.15,
huggingface_hub 1.33, numpy, Pillow, PyYAML, safetensors and tokenizers, and reach no package registry. What the
bench imports beyond that travels as wheels in ``.whl/`` (ignored by git, under ``BUDGET_MIB``): the versions
this checkout's own venv runs (so the device runs what ``make test``'s dry run ran), built for CPython 3.12 on
manylinux x86_64, plus the optional kernels that fit. The code itself runs from the checkout on
``PYTHONPATH`` (the package is not installed there: its ``requires-python`` is 3.11).

Left out on purpose (``LEFT_OUT``): transformers (5.17 there builds and runs every class the bench builds; checked
with the dry run on transformers 5.17.0, huggingface_hub 1.33.0 and tokenizers 0.23.2) and flash-attn-4 (its
CuTe DSL runtime alone is a 92 MB wheel).

    python scripts/device_bundle.py             # fill .whl/, check its size, print the command
    python scripts/device_bundle.py --print     # the command only
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
BUDGET_MIB = 60
# Imported by the bench and absent from the GPU image (or there at a version we do not run): pinned to this venv's.
FROM_VENV = (
    "diffusers",
    "pydantic",
    "pydantic-core",
    "pydantic-settings",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",  # pydantic 2.14 needs >= 4.16
    "python-dotenv",
    "peft",  # the random LoRAs of the distilled variants (the image's version is not ours)
    "av",  # LTX-2 image_to_video re-encodes its input image as H.264 (diffusers' CRF step); 34 MiB, its own FFmpeg
)
# Not in this venv: the bench's optional kernels.
PINNED = {
    "torchao": "0.18.0",  # fp8 compute (pipelines.runtime.profile.apply_fp8); built for torch >= 2.11
    "sageattention": "1.0.6",  # the PyPI release: SageAttention 1's Triton kernels (2.x is not on PyPI as a wheel)
}
LEFT_OUT = {
    "transformers": "5.17 on the image builds and runs every class the bench builds (dry run checked on 5.17.0)",
    "flash-attn-4": (
        "its CuTe DSL runtime (nvidia-cutlass-dsl-libs-cu12 / -cu13 4.8.1) is a 92 MB wheel alone, over the "
        f"{BUDGET_MIB} MiB bundle and the 64 MiB a device call carries; the bench reports it as not installed"
    ),
}
PLATFORMS: tuple[str, ...] = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
)
PLATFORMS += ("manylinux2014_x86_64",)
BENCH_ARGS = "--random-weights --deadline-s 420 --out $OUT/gpu.json"


def requirements() -> dict[str, str]:
    return {name: version(name) for name in FROM_VENV} | PINNED


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def device_command(commit_id: str | None = None) -> str:
    """The one line to paste into a device ``run`` call (with ``carry: [".whl"]``): install the wheels into a
    target dir, then the bench with its deadline, its output kept under ``$OUT``."""
    return (
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
        ".whl/*.whl && export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 "
        f"GENWORKER_COMMIT={commit_id or commit()} && set -o pipefail && "
        f"python3 scripts/bench_gpu.py {BENCH_ARGS} 2>&1 | tee $OUT/bench.log"
    )


def _wheel_name(name: str) -> str:
    return name.replace("-", "_").lower()


def fill(wanted: dict[str, str]) -> list[Path]:
    """Download what ``.whl/`` lacks of ``wanted`` and remove every other wheel (two versions of one package
    stop the whole install there)."""
    WHEELS.mkdir(exist_ok=True)
    keep = {f"{_wheel_name(n)}-{v}" for n, v in wanted.items()}
    for wheel in WHEELS.glob("*.whl"):
        if "-".join(wheel.name.lower().split("-")[:2]) not in keep:
            wheel.unlink()
    for name, pinned in wanted.items():
        if any(WHEELS.glob(f"{_wheel_name(name)}-{pinned}-*.whl")):
            continue
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
             "3.12", "--implementation", "cp", *platforms, "-d", str(WHEELS), f"{name}=={pinned}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:  # pip's own words: no such version for CPython 3.12 on manylinux, no registry
            raise SystemExit(f"device-bundle: {name}=={pinned}: {done.stderr.strip()[-2000:]}")
    return sorted(WHEELS.glob("*.whl"))


def bundle_mib() -> float:
    return sum(p.stat().st_size for p in WHEELS.glob("*.whl")) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the device command only")
    args = parser.parse_args(argv)
    if not args.print:
        for wheel in fill(requirements()):
            print(f"{wheel.stat().st_size / 2**20:8.2f} MiB  {wheel.name}")
        size = bundle_mib()
        print(f"{size:8.2f} MiB  in .whl/ (budget {BUDGET_MIB} MiB)")
        for name, why in LEFT_OUT.items():
            print(f"left out: {name}: {why}")
        if size >= BUDGET_MIB:
            print(f"device-bundle: .whl/ is {size:.1f} MiB, over {BUDGET_MIB} MiB", file=sys.stderr)
            return 1
        print("\nOn the GPU machine, from the repository root with .whl/ in it (allow 10 minutes):\n")
    print(device_command())
    return 0


if __name__ == "__main__":
    sys.exit(main())
