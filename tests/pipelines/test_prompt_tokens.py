"""Prompts past the text encoder's token limit are reported, never cut silently: the adapters count the used
prompt as their pipeline tokenizes it, the run carries the count, and the record and its view keep it."""

from __future__ import annotations

import pytest

from api.views import GenerationView
from foundation.core.catalog import Catalog
from foundation.core.contract import CreateRequest, GenerationRecord, PromptTokens, Status
from foundation.core.resolve import resolve
from foundation.queue.base import Outcome
from foundation.queue.records import finished, started
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from worker.pipeline_run import RunHooks, run_pipeline

LONG = "a red fox runs through the snow " * 40  # 1,240 characters


@pytest.mark.parametrize(("model", "limit"), [("tiny-wan", 512), ("tiny-ltx2", 1024)])
def test_adapters_count_the_prompt_as_their_pipeline_encodes_it(
    model_cache: ModelCache, catalog: Catalog, make_job: MakeJob, model: str, limit: int
) -> None:
    adapter = model_cache.get(catalog.models[model])
    short = adapter.prompt_tokens(make_job(model, prompt="a fox"))  # type: ignore[attr-defined]
    assert short.limit == limit and not short.truncated and short.kept == short.total > 0
    prompt = LONG * 2 if model == "tiny-ltx2" else LONG
    long = adapter.prompt_tokens(make_job(model, prompt=prompt))  # type: ignore[attr-defined]
    assert long.truncated and long.total > limit and long.kept == limit
    tokenizer = adapter.pipe.tokenizer  # type: ignore[attr-defined]
    encoded = tokenizer(prompt.strip(), padding="max_length", max_length=limit, truncation=True).input_ids
    assert len(encoded) == long.kept  # what the pipeline's own call keeps


def test_the_run_and_the_record_carry_the_count(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    job = make_job("tiny-wan", prompt=LONG, variant="fast", ratio="1:1", duration_seconds=1)
    rendered = run_pipeline(model_cache, catalog.models["tiny-wan"], job, RunHooks())
    assert rendered.prompt_tokens is not None and rendered.prompt_tokens.truncated
    request = CreateRequest.model_validate(
        {"model": "tiny-wan", "mode": "text_to_video", "variant": "fast", "parameters": {}, "input": {"prompt": LONG}}
    )
    _, hold = resolve(request, catalog)
    record = started(
        GenerationRecord(
            id="gen_1",
            model="tiny-wan",
            mode="text_to_video",
            variant="fast",
            parameters=job.model_dump(include={"resolution", "ratio", "duration_seconds", "seed"}),
            input={"prompt": LONG},
            price_hold=hold,
            status=Status.queued,
        )
    )
    done = finished(record, Outcome(status=Status.succeeded, prompt_tokens=rendered.prompt_tokens))
    assert done.prompt_tokens == PromptTokens(total=rendered.prompt_tokens.total, kept=512, limit=512, truncated=True)
    assert GenerationRecord.model_validate_json(done.model_dump_json()).prompt_tokens == done.prompt_tokens
    assert "prompt_tokens" in GenerationView.model_fields
