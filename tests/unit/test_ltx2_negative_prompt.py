"""LTX-2 runs Lightricks' default negative prompt as it stands at the commit the catalog cites."""

from __future__ import annotations

from foundation.core.catalog import load_catalog

# Lightricks/LTX-2 @400fd31054597515f47125691032c04b1c3ee24e packages/ltx-pipelines/src/ltx_pipelines/utils/
# constants.py DEFAULT_NEGATIVE_PROMPT: its opening tags (added 2026-08-11) and its close.
OFFICIAL_START = "has_subtitles, has_blurbox, transition from black, transition to black, speech_ending_short, blurry,"
OFFICIAL_END = "inconsistent tone, cinematic oversaturation, stylized filters, or AI artifacts."


def test_ltx2_negative_prompt_is_the_cited_commits() -> None:
    catalog = load_catalog()
    for model in ("ltx-2", "tiny-ltx2", "tiny-ltx2-two-stage"):
        negative = catalog.models[model].negative_prompt
        assert negative.startswith(OFFICIAL_START) and negative.endswith(OFFICIAL_END), model
