"""The playground in a real Chromium against a real ``genworker up``: the newcomer's path, looked at.

One flow, as a person would click it: the form built from /v1/models, tiny-wan, then tiny-ltx2 with
audio, each watched to the end and played inline; a bad seed answered with its coded error; the
recent list with posters; the page at phone width. Every state is saved as a screenshot. At the end,
every response the browser received (bodies and headers, from the DevTools network log) is searched
for the project's key.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from foundation.core.contract import Stage
from tests.browser.conftest import Up

JOB_TIMEOUT_S = 180
TIMELINES: list[list[str]] = []  # the stage keys each generation's timeline showed, in order


# The order a timeline may show a generation's states in, one attempt: queued, running, each stage as the
# worker reaches it, then one terminal status, last.
_ORDER = ["queued", "running"] + [f"running:{stage}" for stage in Stage if stage not in ("queued", "done")]


def assert_in_order(stages: list[str]) -> None:
    assert stages[0] == "queued" and stages[-1] in {"succeeded", "failed", "canceled"}, stages
    assert len(set(stages)) == len(stages), stages  # nothing shown twice
    body = stages[:-1]
    assert body == sorted(body, key=_ORDER.index), stages


def wait_for(driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], Any], timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)


def js(driver: webdriver.Chrome, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def fill_form(driver: webdriver.Chrome, model: str, prompt: str, duration: str = "1") -> None:
    Select(driver.find_element(By.ID, "model")).select_by_value(model)
    Select(driver.find_element(By.ID, "resolution")).select_by_value("144p")
    Select(driver.find_element(By.ID, "duration")).select_by_value(duration)
    box = driver.find_element(By.ID, "prompt")
    box.clear()
    box.send_keys(prompt)


def input_png(where: Path) -> Path:
    """A small gradient PNG, the input image of an image_to_video generation."""
    from PIL import Image

    image = Image.new("RGB", (64, 36))
    image.putdata([(x * 4, y * 7, 128) for y in range(36) for x in range(64)])
    path = where / "input.png"
    image.save(path)
    return path


def press_generate_with_the_keyboard(driver: webdriver.Chrome) -> None:
    """Tab from the prompt to the Generate button and press Enter, as a keyboard user does."""
    driver.find_element(By.ID, "prompt").click()
    for _ in range(12):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        if js(driver, "return document.activeElement.id") == "submit":
            ActionChains(driver).send_keys(Keys.ENTER).perform()
            return
    raise AssertionError("Generate is not reachable with Tab from the prompt")


def generate(driver: webdriver.Chrome, shots: Path, name: str, *, keyboard: bool = False) -> str:
    """Press Generate, see it progress, wait for the end; the generation's id."""
    quoted = wait_for(driver, lambda d: d.find_element(By.ID, "price").get_attribute("data-amount"))
    before = js(driver, "return document.getElementById('gen-id').textContent")
    if keyboard:
        press_generate_with_the_keyboard(driver)
    else:
        driver.find_element(By.ID, "submit").click()
    wait_for(driver, lambda d: js(d, "return document.getElementById('gen-id').textContent") != before)
    driver.save_screenshot(str(shots / f"{name}-progress.png"))
    assert driver.find_element(By.ID, "progress").is_displayed()
    wait_for(driver, lambda d: js(d, "return document.body.dataset.status") in {"succeeded", "failed"}, JOB_TIMEOUT_S)
    assert js(driver, "return document.body.dataset.status") == "succeeded", driver.find_element(By.ID, "error").text
    stages = js(driver, "return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.key)")
    assert stages[-1] == "succeeded", stages
    assert_in_order(stages)
    TIMELINES.append(stages)
    assert float(driver.find_element(By.ID, "progress").get_attribute("value")) == 1.0
    # The hold shown before submitting is the one the server took. The stream's terminal status comes before the
    # record with its signed URLs (one GET later): the result shows with that record.
    wait_for(driver, lambda d: d.find_element(By.ID, "result").is_displayed())
    assert driver.find_element(By.ID, "final-price").text.endswith(f"hold ${quoted})"), quoted
    return str(driver.find_element(By.ID, "gen-id").text)


def assert_plays(driver: webdriver.Chrome) -> dict[str, Any]:
    """The inline player reaches HAVE_FUTURE_DATA and its clock moves; its state."""
    video = driver.find_element(By.ID, "video")
    js(driver, "arguments[0].muted = true; arguments[0].loop = true; arguments[0].play();", video)
    wait_for(driver, lambda d: js(d, "return arguments[0].readyState", video) >= 3, 20)
    start = js(driver, "return arguments[0].currentTime", video)
    wait_for(driver, lambda d: js(d, "return arguments[0].currentTime", video) != start, 10)
    state: dict[str, Any] = js(
        driver,
        "const v = arguments[0]; return {error: v.error && v.error.code, width: v.videoWidth, poster: v.poster,"
        " audio: v.webkitAudioDecodedByteCount, src: v.currentSrc};",
        video,
    )
    assert state["error"] is None and state["width"] == 256, state
    assert "/v1/artifacts/" in state["poster"] and "sig=" in state["src"], state
    return state


def received(driver: webdriver.Chrome) -> list[tuple[str, bytes]]:
    """(url, bytes) of every request header set, response header set and response body seen so far."""
    seen: list[tuple[str, bytes]] = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            request = params["request"]
            seen.append((request["url"], json.dumps(request).encode()))
        elif message["method"] == "Network.responseReceived":
            response = params["response"]
            head = {"status": response["status"], "headers": response.get("headers", {})}
            seen.append((response["url"], json.dumps(head).encode()))
            try:
                body = driver.execute_cdp_cmd("Network.getResponseBody", {"requestId": params["requestId"]})
            except WebDriverException:  # media ranges and aborted streams keep no body
                continue
            data = base64.b64decode(body["body"]) if body["base64Encoded"] else body["body"].encode()
            seen.append((response["url"], data))
    return seen


def test_the_model_list_puts_runnable_models_first_and_disables_the_others(chrome: webdriver.Chrome, up: Up) -> None:
    """Models a worker hosts come first; the others are listed disabled, saying why, and Generate stays off for
    them; before the first generation the right half holds a placeholder."""
    driver = chrome
    driver.get(up.base_url + "/")
    wait_for(driver, lambda d: js(d, "return document.body.dataset.ready") == "true")
    catalog = httpx.get(up.base_url + "/v1/models").json()["data"]
    runnable = [m["id"] for m in catalog if m["available"]]
    others = [m["id"] for m in catalog if not m["available"]]
    assert runnable and others, catalog  # up hosts the tiny models; the real ones have no worker here
    options = js(driver, "return [...document.getElementById('model').options].map(o => [o.value, o.disabled, o.text])")
    assert [value for value, _, _ in options] == runnable + others
    assert [disabled for _, disabled, _ in options] == [False] * len(runnable) + [True] * len(others)
    assert all(text.endswith("unavailable: no worker hosts it") for _, _, text in options[len(runnable) :])
    assert not [text for _, _, text in options if "((" in text or "))" in text or ") (" in text]
    assert driver.find_element(By.ID, "model").get_attribute("value") == runnable[0]
    assert driver.find_element(By.ID, "placeholder").is_displayed()
    assert not driver.find_element(By.ID, "current").is_displayed()
    wait_for(driver, lambda d: d.find_element(By.ID, "price").get_attribute("data-amount"))
    assert driver.find_element(By.ID, "submit").is_enabled()
    # Chosen anyway (a script, a stale page): Generate stays off and the page says why.
    js(
        driver,
        "const s = document.getElementById('model'); s.value = arguments[0]; s.dispatchEvent(new Event('change'));",
        others[0],
    )
    wait_for(driver, lambda d: not d.find_element(By.ID, "submit").is_enabled())
    assert "unavailable: no worker hosts it" in driver.find_element(By.ID, "model-hint").text


@pytest.mark.slow
def test_playground_makes_and_plays_videos(chrome: webdriver.Chrome, up: Up, shots: Path) -> None:
    driver = chrome
    started = time.monotonic()
    phases: dict[str, float] = {}  # seconds into the flow at each screenshot, printed with -s
    driver.get(up.base_url + "/")
    wait_for(driver, lambda d: js(d, "return document.body.dataset.ready") == "true")
    models = [o.get_attribute("value") for o in Select(driver.find_element(By.ID, "model")).options]
    assert {"tiny-wan", "tiny-ltx2"} <= set(models)
    # Every control has a label; the session cookie is out of script's reach (HttpOnly).
    unlabeled = js(
        driver,
        "return [...document.querySelectorAll('select, textarea, input')].filter(e => !e.labels.length).map(e => e.id)",
    )
    assert unlabeled == []
    assert "genworker_playground" not in js(driver, "return document.cookie")
    driver.save_screenshot(str(shots / "01-form.png"))
    phases["01-form.png"] = round(time.monotonic() - started, 1)

    # tiny-wan: no audio offered.
    fill_form(driver, "tiny-wan", "a red fox running through snow")
    assert not driver.find_element(By.ID, "audio").is_displayed()
    # The live preview: one <img>, its picture replaced in place at each step. Every step it showed is noted from
    # the mutation records of its data-step (each record keeps the value it replaced): previews that arrive in one
    # read of the stream are shown one after another in one task, and the observer then sees them all at once.
    js(
        driver,
        "window.replacedSteps = []; const img = document.getElementById('preview');"
        "new MutationObserver((records) => records.forEach((r) => window.replacedSteps.push(r.oldValue)))"
        ".observe(img, {attributes: true, attributeFilter: ['data-step'], attributeOldValue: true});",
    )
    wan = generate(driver, shots, "02-tiny-wan", keyboard=True)
    steps = js(
        driver,
        "const shown = window.replacedSteps.filter((v) => v !== null);"
        "return [...shown, document.getElementById('preview').dataset.step].map(Number);",
    )
    assert len(steps) >= 2 and steps == sorted(set(steps)), steps
    preview = driver.find_element(By.ID, "preview")
    # The last preview gave way to the video; it holds the final step's picture.
    assert not preview.is_displayed() and len(driver.find_elements(By.CSS_SELECTOR, "img#preview")) == 1
    assert js(driver, "return arguments[0].complete && arguments[0].naturalWidth", preview) == 256
    assert (preview.get_attribute("src") or "").startswith("data:image/jpeg;base64,")
    assert not driver.find_element(By.ID, "placeholder").is_displayed()
    state = assert_plays(driver)
    assert driver.find_element(By.ID, "actual-prompt").text == "a red fox running through snow"
    assert "no audio" in driver.find_element(By.ID, "video-facts").text
    download = driver.find_element(By.ID, "download").get_attribute("href") or ""
    assert "/v1/artifacts/" in download and "sig=" in download and state["src"] == download
    driver.save_screenshot(str(shots / "03-tiny-wan-done.png"))
    phases["03-tiny-wan-done.png"] = round(time.monotonic() - started, 1)

    # tiny-ltx2 with audio: the checkbox appears, checked by the model's default.
    fill_form(driver, "tiny-ltx2", "a lighthouse in a storm, waves and thunder")
    audio = driver.find_element(By.ID, "audio")
    assert audio.is_displayed() and audio.is_selected()
    ltx = generate(driver, shots, "04-tiny-ltx2")
    made = [wan, ltx]
    state = assert_plays(driver)
    wait_for(
        driver, lambda d: js(d, "return arguments[0].webkitAudioDecodedByteCount", d.find_element(By.ID, "video")) > 0
    )
    assert "with audio" in driver.find_element(By.ID, "video-facts").text
    driver.save_screenshot(str(shots / "05-tiny-ltx2-done.png"))
    phases["05-tiny-ltx2-done.png"] = round(time.monotonic() - started, 1)

    # A mode that takes an image (per /v1/models) gets a file input, sent as a data: URI; the others none.
    catalog = httpx.get(up.base_url + "/v1/models").json()["data"]
    ltx_modes = next(m["modes"] for m in catalog if m["id"] == "tiny-ltx2")
    mode = Select(driver.find_element(By.ID, "mode"))
    for name in [o.get_attribute("value") or "" for o in mode.options]:
        mode.select_by_value(name)
        takes_image = "image" in ltx_modes[name].get("inputs", []) or name.startswith("image_to_")
        assert driver.find_element(By.ID, "image").is_displayed() is takes_image, name
        if takes_image:
            driver.find_element(By.ID, "image").send_keys(str(input_png(shots)))
            made.append(generate(driver, shots, f"05-tiny-ltx2-{name}"))
            assert_plays(driver)
    mode.select_by_value("text_to_video")

    # The recent list shows them all, newest first, with posters that loaded.
    driver.find_element(By.ID, "refresh").click()
    recent = "return [...document.querySelectorAll('#recent li')].map(li => li.dataset.id)"
    wait_for(driver, lambda d: js(d, recent)[: len(made)] == made[::-1])
    posters = (
        f"return [...document.querySelectorAll('#recent li')].slice(0, {len(made)})"
        ".map(li => li.querySelector('img')).map(img => img && img.complete ? img.naturalWidth : 0)"
    )
    wait_for(driver, lambda d: js(d, posters) == [256] * len(made))
    js(driver, "document.getElementById('recent-title').scrollIntoView()")
    driver.save_screenshot(str(shots / "06-recent.png"))
    phases["06-recent.png"] = round(time.monotonic() - started, 1)

    # A bad parameter: the server refuses its quote with its code and message, and Generate stays off (what the
    # server would refuse is never started).
    driver.find_element(By.CSS_SELECTOR, "details summary").click()
    driver.find_element(By.ID, "seed").send_keys("99999999999999999999")
    refused = "Cannot generate this: invalid_parameter: parameters.seed"
    wait_for(driver, lambda d: d.find_element(By.ID, "price").text.startswith(refused))
    assert not driver.find_element(By.ID, "submit").is_enabled()
    driver.save_screenshot(str(shots / "07-error.png"))
    phases["07-error.png"] = round(time.monotonic() - started, 1)
    driver.find_element(By.ID, "seed").clear()

    # Cancel: a longer clip, canceled at once, ends canceled (queued: at once; running: at the next step).
    fill_form(driver, "tiny-ltx2", "a long storm to cancel", duration="5")
    Select(driver.find_element(By.ID, "resolution")).select_by_value("240p")
    wait_for(driver, lambda d: d.find_element(By.ID, "price").get_attribute("data-amount"))
    driver.find_element(By.ID, "submit").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "cancel").is_displayed() and d.find_element(By.ID, "gen-id").text)
    driver.find_element(By.ID, "cancel").click()
    terminal = {"succeeded", "failed", "canceled"}
    wait_for(driver, lambda d: js(d, "return document.body.dataset.status") in terminal, JOB_TIMEOUT_S)
    assert js(driver, "return document.body.dataset.status") == "canceled"
    assert not driver.find_element(By.ID, "cancel").is_displayed()
    # The cancel's own answer and the stream both report it: the timeline ends with one "canceled", and
    # no running stage the stream delivered late is appended after it.
    canceled = js(driver, "return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.key)")
    assert canceled[-1] == "canceled", canceled
    assert_in_order(canceled)
    driver.save_screenshot(str(shots / "08-canceled.png"))
    phases["08-canceled.png"] = round(time.monotonic() - started, 1)

    # Phone width: one column, nothing wider than the screen.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 375, "height": 812, "deviceScaleFactor": 1, "mobile": True}
    )
    try:
        # A mobile viewport widens to fit content wider than the screen: the width must stay 375.
        wide = (
            "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 376)"
            ".map(e => `${e.tagName}#${e.id}.${e.className}`)"
        )
        wait_for(driver, lambda d: js(d, "return window.innerWidth") != 1280)
        time.sleep(0.3)
        assert js(driver, "return [window.innerWidth, document.documentElement.scrollWidth]") == [375, 375], js(
            driver, wide
        )
        driver.save_screenshot(str(shots / "09-phone.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    # No script error on the way (answers the page expects, such as the 400 above, are not errors).
    console = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert [m for m in console if "Failed to load resource" not in m] == []

    # No response the page received, and no request it sent, carries the key.
    seen = received(driver)
    # Where the API has the event stream, the page followed it and saw the stages live (every
    # progress note is replayed); without it, it polled.
    streams = [data for url, data in seen if url.endswith(f"/playground/api/generations/{wan}/events")]
    if "/v1/generations/{generation_id}/events" in httpx.get(up.base_url + "/v1/openapi.json").json()["paths"]:
        assert any(b'"status": 200' in d and b"text/event-stream" in d for d in streams), streams
        for timeline in TIMELINES:
            assert any(key.startswith("running:denoising") for key in timeline), timeline
    urls = {url.split("?")[0].removeprefix(up.base_url) for url, _ in seen}
    assert {"/", "/playground/static/playground.js", "/playground/api/models", "/playground/api/generations"} <= urls
    assert [url for url, data in seen if up.key.encode() in data] == []
    print(f"browser flow: {time.monotonic() - started:.1f} s ({phases}), {len(seen)} network records searched")
