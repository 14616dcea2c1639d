"""The genworker command imports torch, torchao, diffusers and transformers without the log lines that read as a
broken install, and still shows every other line of the same loggers."""

from __future__ import annotations

import os
import subprocess
import sys

from foundation.core.harmless import HARMLESS

# What a worker imports (a Wan I2V job builds a CLIP image processor, HunyuanVideo 1.5 a guider), then one line
# of each filtered logger that is not a known-harmless one.
SCRIPT = """
import logging
import genworker.cli
import torchao
from diffusers import HunyuanVideo15Pipeline, LTX2Pipeline, WanImageToVideoPipeline
from diffusers.guiders import ClassifierFreeGuidance
from transformers import CLIPImageProcessor
ClassifierFreeGuidance(guidance_scale=6.0)
for name in {names!r}:
    logging.getLogger(name).warning("still shown: %s", name)
"""


def _output(script: str) -> str:
    """What ``script`` prints, stdout and stderr, run in a fresh interpreter (imports and their log lines anew)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout + result.stderr


def test_known_harmless_lines_are_quiet_and_the_rest_shows() -> None:
    names = [name for name, _fragment, _why in HARMLESS]
    output = _output(SCRIPT.format(names=names))
    for _name, fragment, _why in HARMLESS:
        assert fragment not in output
    for name in names:
        assert f"still shown: {name}" in output


def test_without_the_filters_the_lines_are_there() -> None:
    """The filters hide something real: the same imports without them print the known lines."""
    script = SCRIPT.replace("import genworker.cli\n", "").replace("still shown", "unfiltered")
    output = _output(script.format(names=[]))
    seen = [fragment for _name, fragment, _why in HARMLESS if fragment in output]
    assert len(seen) >= 3, output[-2000:]
