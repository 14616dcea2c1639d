"""Shared fixtures. Servers (redis-server, SeaweedFS) start on free loopback ports and stop by PID;
a fixture that cannot start its server fails the test, it never skips."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

pytest_plugins = [
    "tests.fixtures.redis_server",
    "tests.fixtures.redis_cluster",
    "tests.fixtures.seaweed",
    "tests.fixtures.tiny_models",
]

# tests/long: runs of a minute or more that `make test` leaves to `make test-long` (CI stays under 20 minutes);
# the short versions of what they show are in make test (see each module's docstring).
collect_ignore_glob = [] if os.environ.get("GENWORKER_LONG_TESTS") == "1" else ["long/*"]

# make test stays under 15 minutes on two cores: of these tests, each case of which loads and runs tiny models or
# the full-size simulation, make test runs the first case (or none, where a shorter test of the same claim is in
# make test: named beside it) and `make test-extended` the rest. .ci/run runs both.
FIRST_CASE_ONLY = {
    "tests/pipelines/test_distilled_sampler.py::test_a_loaded_model_runs_distilled_jobs_first_order_and_standard_ones_with_the_corrector",
    "tests/pipelines/test_shipped_profiles.py::test_a_shipped_profile_runs_on_the_tiny_model_in_bfloat16",
    "tests/pipelines/test_wan.py::test_output_matches_the_request",
    "tests/pipelines/test_ltx2.py::test_output_matches_the_request",
    "tests/pipelines/test_previews.py::test_every_tiny_model_previews_each_step_as_a_small_jpeg",
    "tests/pipelines/test_resume.py::test_the_worker_deletes_a_checkpoint_that_does_not_fit_and_runs_the_job_from_step_0_in_the_same_attempt",
    "tests/pipelines/test_resume.py::test_a_checkpoint_of_this_job_that_does_not_fit_its_loop_is_refused_at_the_restore",
    "tests/pipelines/test_resume.py::test_ltx2_with_audio_resumes_exactly",
    "tests/pipelines/test_ltx2_two_stage.py::test_standard_keeps_stage_1_audio_and_fast_the_refined_one",
    "tests/pipelines/test_ltx2_schedule.py::test_stage_1_is_the_official_list",
    "tests/pipelines/test_image_to_video.py::test_wan_i2v_feeds_the_image_to_the_transformer_and_it_changes_the_video",
    "tests/pipelines/test_generic.py::test_every_offered_shape_is_exact_through_generate",
}
EXTENDED = {
    # the short version: test_simulate.py::test_one_job_at_full_size_within_the_plan
    "tests/pipelines/test_simulate.py::test_one_job_per_family_runs_at_full_size_within_the_plan",
    # the short version: test_gpu_bench.py::test_the_dry_run_computes_the_floors_of_each_variant
    "tests/pipelines/test_gpu_bench.py::test_the_device_command_runs_on_cpu_as_its_dry_run",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: set[str] = set()
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        if base in EXTENDED or (base in FIRST_CASE_ONLY and base in seen):
            item.add_marker(pytest.mark.extended)
        seen.add(base)
    files = {item.nodeid.split("::", 1)[0] for item in items}
    stale = {name for name in FIRST_CASE_ONLY | EXTENDED if name.split("::", 1)[0] in files and name not in seen}
    if stale:  # a renamed test would otherwise quietly run in make test again, or nowhere
        raise pytest.UsageError(f"tests/conftest.py names tests its files no longer have: {sorted(stale)}")
