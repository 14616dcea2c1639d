"""docs/adding-a-pipeline.md names what ships: every tiny model, the default hosted models and where the
prompt-extension system prompts live."""

from __future__ import annotations

from pathlib import Path

from foundation.settings import WorkerSettings
from pipelines.families.system_prompts import WAN_PROMPT_SETS
from pipelines.tiny.builders import TINY_MODELS

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-pipeline.md"


def test_the_guide_lists_the_tiny_models_the_default_hosted_models_and_the_system_prompts() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in TINY_MODELS:
        assert f"| `{name}` |" in text, name
    hosted = ", ".join(f'"{m}"' for m in WorkerSettings().hosted_models)
    assert f"`[{hosted}]`" in text
    assert "`pipelines/families/system_prompts.py`" in text
    assert "`WAN_PROMPT_SETS`" in text
    for prompt_set in WAN_PROMPT_SETS:  # every upstream task the guide says the table holds
        assert f"`{prompt_set}`" in text, prompt_set
