"""Build the tiny random-weight models (tiny-wan, tiny-ltx2, tiny-chat-llm, the image-to-video ones) offline.

    python scripts/make_tiny_models.py --out var/models [--force]

Complete builds of the current builder version are skipped unless --force. See pipelines/tiny/builders.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipelines.tiny.builders import build_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="var/models", help="directory to write the models into (default var/models)")
    parser.add_argument("--force", action="store_true", help="rebuild even when a complete build exists")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    paths = build_all(args.out, force=args.force)
    for name, path in paths.items():
        print(f"{name}: {path}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
