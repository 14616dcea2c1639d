"""Media benchmark: streaming encode memory/time vs video length, and artifact store throughput.

- Encode: 1 s and 10 s of synthetic 1280x720 frames at 24 fps (a moving gradient with grain, made
  chunk by chunk as a pipeline would hand them over), each in a fresh child process. Reports the
  child's peak RSS (Python side) and ffmpeg's peak RSS, wall time and encode fps. Streaming means
  memory stays flat (10 s / 1 s RSS ratio <= 1.2) while time grows with length.
- Stores: upload files of two sizes to SeaweedFS (``weed mini`` on 127.0.0.1, started here) and to the
  local store, each in a child process (peak RSS shows multipart memory is bounded), then download
  through the signed URL.

    python scripts/bench_media.py [--quick]      # prints the result as JSON
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WIDTH, HEIGHT, FPS, CHUNK = 1280, 720, 24, 8
MIB = 1024 * 1024


def _synthetic_chunks(frames: int, spent: list[float]) -> Any:
    """Chunks of a moving gradient with grain; ``spent[0]`` accumulates the time spent making them."""
    import numpy as np

    started = time.perf_counter()
    rng = np.random.default_rng(0)
    x = np.linspace(0, 255, WIDTH, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, HEIGHT, dtype=np.float32)[:, None]
    base = np.stack([x + 0 * y, y + 0 * x, (x + y) / 2], axis=-1).astype(np.uint8)
    grain = rng.integers(0, 6, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    for start in range(0, frames, CHUNK):
        n = min(CHUNK, frames - start)
        chunk = np.empty((n, HEIGHT, WIDTH, 3), np.uint8)
        for i in range(n):
            shift = 4 * (start + i)
            chunk[i] = np.roll(base, shift, axis=1) + np.roll(grain, shift * 7, axis=0)
        spent[0] += time.perf_counter() - started
        yield chunk
        del chunk
        started = time.perf_counter()


def _child_encode(seconds: int, preset: str) -> dict[str, Any]:
    from foundation.core.media import Media
    from foundation.media.encoder import EncoderSettings, encode_video

    frames = seconds * FPS
    source_s = [0.0]
    media = Media(WIDTH, HEIGHT, float(FPS), frames, _synthetic_chunks(frames, source_s))
    settings = EncoderSettings(codec="libx264", preset=preset)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        encoded = encode_video(
            media, keep_frames=frames, width=WIDTH, height=HEIGHT, out_dir=Path(tmp), settings=settings
        )
        elapsed = time.perf_counter() - started
    return {
        "seconds": seconds,
        "wall_s": elapsed,
        "encode_fps": frames / elapsed,
        # Making the synthetic frames runs in this process while ffmpeg encodes; its share of the wall time.
        "source_s": source_s[0],
        "mp4_mb": encoded.video.bytes / 1e6,
        # ru_maxrss is KiB on Linux; RUSAGE_CHILDREN is the largest child, here ffmpeg.
        "python_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ffmpeg_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def _child_upload(backend: str, path: str, settings_json: str) -> dict[str, Any]:
    import httpx

    from foundation.stores.config import StoreSettings
    from foundation.stores.factory import open_store

    settings = StoreSettings.model_validate_json(settings_json)
    store = open_store(settings, data_dir=Path(path).parent)
    key = f"bench/{os.getpid()}/{Path(path).name}"
    started = time.perf_counter()
    stored = store.put_file(key, Path(path), content_type="video/mp4")
    upload_s = time.perf_counter() - started
    rss_after_upload = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    digest = hashlib.sha256()
    started = time.perf_counter()
    if backend == "s3":
        with httpx.stream("GET", store.sign_url(key).url, timeout=60) as response:
            response.raise_for_status()
            for block in response.iter_bytes(MIB):
                digest.update(block)
    download_s = time.perf_counter() - started
    result = {"upload_s": upload_s, "upload_mb_s": stored.bytes / MIB / upload_s, "rss_mb": rss_after_upload}
    if backend == "s3":
        assert digest.hexdigest() == stored.sha256, "download does not match the upload"
        result |= {"download_s": download_s, "download_mb_s": stored.bytes / MIB / download_s}
    return result


def _in_child(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False, cwd=ROOT, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bench_encode(preset: str, lengths_s: tuple[int, ...]) -> dict[str, Any]:
    runs = {seconds: _in_child("--child-encode", str(seconds), preset) for seconds in lengths_s}
    short, middle, long = runs[1], runs[5], runs[10]

    def by_length(field: str, digits: int = 1) -> dict[str, float]:
        return {str(s): round(r[field], digits) for s, r in runs.items()}

    return {
        "preset": preset,
        "size": f"{WIDTH}x{HEIGHT}@{FPS}",
        "rss_mb_by_seconds": by_length("python_rss_mb"),
        "ffmpeg_rss_mb_by_seconds": by_length("ffmpeg_rss_mb"),
        "time_s_by_seconds": by_length("wall_s", 2),
        "source_s_by_seconds": by_length("source_s", 2),
        "encode_fps_by_seconds": by_length("encode_fps"),
        "mp4_mb_by_seconds": by_length("mp4_mb", 2),
        "rss_ratio_10s_over_1s": round(long["python_rss_mb"] / short["python_rss_mb"], 3),
        # x264's lookahead and ffmpeg's frame queues fill during the first seconds, then stay put.
        "ffmpeg_rss_ratio_10s_over_1s": round(long["ffmpeg_rss_mb"] / short["ffmpeg_rss_mb"], 3),
        "ffmpeg_rss_ratio_10s_over_5s": round(long["ffmpeg_rss_mb"] / middle["ffmpeg_rss_mb"], 3),
        "time_ratio_10s_over_1s": round(long["wall_s"] / short["wall_s"], 2),
        "uncompressed_10s_mb": round(10 * FPS * WIDTH * HEIGHT * 3 / 1e6, 1),
    }


def bench_stores(quick: bool) -> dict[str, Any]:
    from tests.fixtures.seaweed import running_seaweed

    sizes_mib = (16, 64) if quick else (16, 256)
    repeats = 1 if quick else 3
    result: dict[str, Any] = {"sizes_mib": list(sizes_mib), "repeats": repeats}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        files = {}
        for size in sizes_mib:
            files[size] = tmp / f"{size}mib.mp4"
            with files[size].open("wb") as f:
                for _ in range(size):
                    f.write(os.urandom(MIB))
        with running_seaweed(tmp / "seaweed", bucket="bench") as server:
            backends = {
                "s3": json.dumps(
                    {
                        "backend": "s3",
                        "s3_endpoint_url": server.endpoint,
                        "s3_bucket": server.bucket,
                        "s3_access_key_id": server.access_key,
                        "s3_secret_access_key": server.secret_key,
                    }
                ),
                "local": json.dumps({"backend": "local", "local_root": str(tmp / "local")}),
            }
            for backend, settings_json in backends.items():
                for size, path in files.items():
                    runs = [_in_child("--child-upload", backend, str(path), settings_json) for _ in range(repeats)]
                    row = {
                        "upload_mb_s": round(statistics.median(r["upload_mb_s"] for r in runs), 1),
                        "peak_rss_mb": round(max(r["rss_mb"] for r in runs), 1),
                    }
                    if backend == "s3":
                        row["download_mb_s"] = round(statistics.median(r["download_mb_s"] for r in runs), 1)
                    result[f"{backend}_{size}mib"] = row
    return result


def run(quick: bool) -> dict[str, Any]:
    # medium is the production default; veryfast shows the faster end (and, in full runs, 30 s).
    # 5 s is past x264's lookahead (10 frames at veryfast, 40 at medium): ffmpeg's memory is full there.
    plan = {"veryfast": (1, 5, 10)} if quick else {"veryfast": (1, 5, 10, 30), "medium": (1, 5, 10)}
    return {
        "encode": {preset: bench_encode(preset, lengths) for preset, lengths in plan.items()},
        "stores": bench_stores(quick),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child-encode", nargs=2, metavar=("SECONDS", "PRESET"), help=argparse.SUPPRESS)
    parser.add_argument("--child-upload", nargs=3, metavar=("BACKEND", "PATH", "SETTINGS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_encode:
        print(json.dumps(_child_encode(int(args.child_encode[0]), args.child_encode[1])))
    elif args.child_upload:
        print(json.dumps(_child_upload(*args.child_upload)))
    else:
        print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
