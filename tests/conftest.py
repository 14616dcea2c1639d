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

# make test stays under 15 minutes on two cores: of the tests in FIRST_CASE_ONLY, each case of which loads and runs
# tiny models, make test runs the first case and `make test-extended` the rest; those in EXTENDED (a test, or one
# case of it) run in make test-extended only. .ci/run runs both.
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
    # Multi-process runs of 15-60 s whose claims make test shows more briefly elsewhere; named with their case
    # where only one case of a parametrized test moves. (Not test_local_faults: its phases share workers in file
    # order.)
    "tests/integration/test_fleet.py::test_each_of_100_jobs_runs_once_on_a_worker_that_hosts_its_model",
    "tests/integration/test_fleet.py::test_models_follow_the_fleet_as_workers_stop_and_start",
    "tests/client/test_docs_examples.py::test_every_example_of_the_page_runs[docs/client.md]",
    "tests/client/test_docs_examples.py::test_every_example_of_the_page_runs[docs/adding-a-pipeline.md]",
    "tests/pipelines/test_scaffold.py::test_the_scaffold_for_an_unserved_class_passes_its_generated_tests",
    "tests/webhooks/test_replicas.py::test_replicas_deliver_each_others_webhooks_through_a_key_rotation",
    "tests/pipelines/test_context_parallel.py::test_two_gloo_ranks_match_one_process_and_stop_together",
    "tests/e2e/test_data_dir.py::test_processes_in_different_directories_share_one_queue",
    "tests/pipelines/test_compile_cache.py::test_the_keys_of_a_real_torch_blob_are_read_and_plain",
    "tests/client/test_package.py::test_the_api_tier_resolves_without_the_model_stack",
    "tests/integration/test_worker_generate.py::test_generate_jobs_reports_a_failed_job_on_its_line_and_runs_the_rest",
    "tests/unit/test_harmless_warnings.py::test_known_harmless_lines_are_quiet_and_the_rest_shows",
    "tests/integration/test_cluster_worker.py::test_jobs_of_two_slots_run_to_playable_mp4s",
    "tests/integration/test_cluster_worker.py::test_the_worker_heartbeat_and_depth_are_read_across_slots",
    # the short version: test_playground_browser.py::test_the_model_list_puts_runnable_models_first_and_...
    "tests/browser/test_playground_browser.py::test_playground_makes_and_plays_videos",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: set[str] = set()
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        if base in EXTENDED or item.nodeid in EXTENDED or (base in FIRST_CASE_ONLY and base in seen):
            item.add_marker(pytest.mark.extended)
        seen.update((base, item.nodeid))
    files = {item.nodeid.split("::", 1)[0] for item in items}
    stale = {name for name in FIRST_CASE_ONLY | EXTENDED if name.split("::", 1)[0] in files and name not in seen}
    if stale:  # a renamed test would otherwise quietly run in make test again, or nowhere
        raise pytest.UsageError(f"tests/conftest.py names tests its files no longer have: {sorted(stale)}")
