// genworker playground. No dependencies, no key: every call goes to this origin's /playground/api,
// with the session's CSRF token in a header; the server adds the project's key.
"use strict";

(() => {
  const API = "/playground/api";
  const TOKEN = document.querySelector('meta[name="csrf-token"]').content;
  const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
  // The worker's stages in the order it goes through them (foundation/core/contract.py, Stage).
  const STAGES = ["queued", "loading", "extending_prompt", "denoising", "decoding", "encoding", "uploading"];
  const $ = (id) => document.getElementById(id);

  let models = [];
  let watching = null; // {id, abort}: the generation this page follows now
  // How far along the timeline shows the generation: answers arrive over three paths (the stream, polls,
  // the cancel's own answer), and one that is behind what is shown must not be appended after it.
  let shown = -1;
  let quoteSeq = 0;
  let quoteTimer = null;

  class ApiProblem extends Error {
    constructor(status, error) {
      const e = error || { code: `http_${status}`, message: "unexpected answer from the server", param: null };
      super(e.message);
      this.status = status;
      this.code = e.code;
      this.param = e.param;
    }
  }

  async function call(method, path, body, headers = {}) {
    const init = {
      method,
      headers: { "X-CSRF-Token": TOKEN, Accept: "application/json", ...headers },
      credentials: "same-origin",
      cache: "no-store",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(API + path, init);
    } catch (err) {
      throw new ApiProblem(0, { code: "network_error", message: "the server could not be reached", param: null });
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (!response.ok) throw new ApiProblem(response.status, data && data.error);
    return { data, response };
  }

  function randomKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes); // randomUUID needs a secure context; this works on plain http too
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // ------------------------------------------------------------------ errors
  function showError(err) {
    const box = $("error");
    const code = document.createElement("code");
    code.textContent = err.code;
    box.replaceChildren(code, document.createTextNode(`: ${err.message}`));
    if (err.param) box.append(document.createTextNode(` (${err.param})`));
    box.dataset.code = err.code;
    box.hidden = false;
    box.scrollIntoView({ block: "nearest" });
  }

  function clearError() {
    $("error").hidden = true;
    $("error").dataset.code = "";
  }

  // ------------------------------------------------------------------ the form
  function fillSelect(select, values, selected, label = (v) => String(v)) {
    const want = values.some((v) => String(v) === String(selected)) ? String(selected) : String(values[0]);
    select.replaceChildren(...values.map((v) => new Option(label(v), String(v), false, String(v) === want)));
  }

  const currentModel = () => models.find((m) => m.id === $("model").value);

  // "Wan 2.1 T2V 14B (480p) · wan2.1-t2v-14b-480p": a display name may carry its own parentheses.
  function modelLabel(m) {
    return m.available ? `${m.display_name} · ${m.id}` : `${m.display_name} · ${m.id} — unavailable: no worker hosts it`;
  }

  function fillModels() {
    const options = models.map((m) => {
      const option = new Option(modelLabel(m), m.id);
      option.disabled = !m.available;
      return option;
    });
    $("model").replaceChildren(...options);
    const first = models.find((m) => m.available);
    if (first) $("model").value = first.id;
  }

  // Generate only what the server would take: a hosted model and variant, and a quote it accepted.
  function updateSubmit() {
    const m = currentModel();
    const variant = m && m.modes[$("mode").value] && m.modes[$("mode").value].variants[$("variant").value];
    const runnable = Boolean(m && m.available && variant && variant.available !== false);
    const quoted = $("price").dataset.amount !== "";
    $("submit").disabled = !(runnable && quoted);
  }

  function modeNeedsImage(name, mode) {
    if (mode && typeof mode.image === "boolean") return mode.image;
    if (mode && Array.isArray(mode.inputs)) return mode.inputs.includes("image");
    if (mode && mode.requires_image) return true;
    return name.startsWith("image_to_");
  }

  function onModelChange() {
    const m = currentModel();
    if (!m) return;
    const modes = Object.keys(m.modes);
    fillSelect($("mode"), modes, modes.includes("text_to_video") ? "text_to_video" : modes[0]);
    fillSelect($("resolution"), m.resolutions, m.defaults.resolution);
    fillSelect($("ratio"), m.ratios, m.defaults.ratio);
    fillSelect($("duration"), m.durations, m.defaults.duration_seconds, (d) => `${d} s`);
    $("audio-field").hidden = !m.audio;
    $("audio").checked = m.audio && m.defaults.audio === true;
    $("extend-field").hidden = !m.prompt_extend;
    $("prompt-extend").checked = m.prompt_extend && m.defaults.prompt_extend === true;
    $("prompt").maxLength = m.prompt_max_chars;
    const ready = m.available ? "a worker is ready" : "unavailable: no worker hosts it, so Generate is off";
    $("model-hint").textContent = `${m.family}, ${m.fps} fps; ${ready}; ${m.queue_depth} waiting.`;
    onModeChange();
    countPrompt();
  }

  function onModeChange() {
    const m = currentModel();
    const mode = m.modes[$("mode").value];
    const variants = Object.keys(mode.variants);
    fillSelect($("variant"), variants, variants.includes("standard") ? "standard" : variants[0]);
    for (const option of $("variant").options) {
      if (mode.variants[option.value].available === false) {
        option.disabled = true;
        option.textContent += " — unavailable: no worker has its weights";
      }
    }
    if ($("variant").selectedOptions[0] && $("variant").selectedOptions[0].disabled) {
      const usable = [...$("variant").options].find((o) => !o.disabled);
      if (usable) $("variant").value = usable.value;
    }
    $("image-field").hidden = !modeNeedsImage($("mode").value, mode);
    onVariantChange();
  }

  function onVariantChange() {
    const variant = currentModel().modes[$("mode").value].variants[$("variant").value];
    $("variant-hint").textContent = `${variant.steps} steps, rate × ${variant.rate_multiplier}`;
    scheduleQuote();
  }

  function countPrompt() {
    const m = currentModel();
    $("prompt-count").textContent = `${$("prompt").value.length} / ${m ? m.prompt_max_chars : "?"} characters`;
  }

  function parameters() {
    const m = currentModel();
    const p = {
      resolution: $("resolution").value,
      ratio: $("ratio").value,
      duration_seconds: Number($("duration").value),
    };
    if (m.audio) p.audio = $("audio").checked;
    if (m.prompt_extend) p.prompt_extend = $("prompt-extend").checked;
    const seed = $("seed").value.trim();
    // Sent as typed (a number when it looks like one): the server says what is wrong with it.
    if (seed) p.seed = /^\d+$/.test(seed) ? Number(seed) : seed;
    const negative = $("negative").value;
    if (negative.trim()) p.negative_prompt = negative;
    return p;
  }

  // A changed form voids the shown price at once (dimmed, no amount) until the new one arrives; the text
  // stays, so nothing under the pointer moves while a click is under way.
  function scheduleQuote() {
    clearTimeout(quoteTimer);
    quoteSeq += 1;
    $("price").classList.add("stale");
    $("price").dataset.amount = "";
    updateSubmit();
    quoteTimer = setTimeout(quote, 120);
  }

  async function quote() {
    const seq = ++quoteSeq;
    const body = { model: $("model").value, mode: $("mode").value, variant: $("variant").value, parameters: parameters() };
    const price = $("price");
    try {
      const { data } = await call("POST", "/quote", body);
      if (seq !== quoteSeq) return;
      price.classList.remove("stale");
      price.textContent = `Price hold: $${data.price_hold.amount} ${data.price_hold.currency} (taken at create; the final price is never above it)`;
      price.dataset.amount = data.price_hold.amount;
    } catch (err) {
      if (seq !== quoteSeq) return;
      price.classList.remove("stale");
      // The quote runs the create's own checks: what it refuses, Generate would be refused too.
      price.textContent = `Cannot generate this: ${err.code}: ${err.message}`;
      price.dataset.amount = "";
    }
    updateSubmit();
  }

  function readDataUri(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  async function submit(event) {
    event.preventDefault();
    clearError();
    const body = {
      model: $("model").value,
      mode: $("mode").value,
      variant: $("variant").value,
      parameters: parameters(),
      input: { prompt: $("prompt").value },
    };
    const button = $("submit");
    button.disabled = true;
    try {
      const file = $("image-field").hidden ? null : $("image").files[0];
      if (file) body.input.image = await readDataUri(file);
      // One key per press: a retried request could never create a second generation.
      const { data, response } = await call("POST", "/generations", body, { "Idempotency-Key": randomKey() });
      watch(data, response);
      refreshRecent();
    } catch (err) {
      showError(err);
    } finally {
      updateSubmit();
    }
  }

  // ------------------------------------------------------------------ one generation
  function retryAfterS(response) {
    const value = Number(response.headers.get("Retry-After"));
    return Number.isFinite(value) && value >= 0 ? Math.min(value, 60) : 5;
  }

  function stopWatching() {
    if (watching) watching.abort.abort();
    watching = null;
  }

  function watch(record, response) {
    stopWatching();
    $("timeline").replaceChildren();
    shown = -1;
    $("preview").hidden = true; // the last generation's previews stay with it
    $("preview").removeAttribute("src");
    $("video").removeAttribute("data-generation");
    render(record);
    if (TERMINAL.has(record.status)) return;
    const mine = { id: record.id, abort: new AbortController() };
    watching = mine;
    follow(mine, retryAfterS(response));
  }

  async function follow(mine, delayS) {
    if (await streamEvents(mine)) return;
    await poll(mine, delayS);
  }

  // Polls following the server's Retry-After until the generation ends.
  async function poll(mine, delayS) {
    let delay = delayS;
    while (watching === mine) {
      await sleep(delay * 1000);
      if (watching !== mine) return;
      try {
        const { data, response } = await call("GET", `/generations/${mine.id}`);
        if (watching !== mine) return;
        render(data);
        if (TERMINAL.has(data.status)) {
          refreshRecent();
          return;
        }
        delay = retryAfterS(response);
      } catch (err) {
        showError(err);
        if (err.status === 403 || err.status === 404) return;
        delay = Math.max(delay, 5);
      }
    }
  }

  // The event stream, where the API has one: true once it saw the end; false to fall back to polling.
  async function streamEvents(mine) {
    let response;
    try {
      response = await fetch(`${API}/generations/${mine.id}/events`, {
        headers: { "X-CSRF-Token": TOKEN, Accept: "text/event-stream" },
        credentials: "same-origin",
        cache: "no-store",
        signal: mine.abort.signal,
      });
    } catch (err) {
      return false;
    }
    const type = response.headers.get("Content-Type") || "";
    if (!response.ok || !type.startsWith("text/event-stream") || !response.body) {
      if (response.body) response.body.cancel().catch(() => {});
      return false;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      while (watching === mine) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const status = onEvent(block);
          if (TERMINAL.has(status)) {
            reader.cancel().catch(() => {});
            await finish(mine);
            return true;
          }
        }
      }
    } catch (err) {
      return false;
    }
    return false;
  }

  // One SSE block: its JSON data carries the status (itself or under generation/record/data); an event
  // whose name ends in a terminal status ends the stream even without one. Comments (heartbeats) are skipped.
  function onEvent(block) {
    const lines = block.split("\n");
    const field = (name) => lines.filter((l) => l.startsWith(`${name}:`)).map((l) => l.slice(name.length + 1).replace(/^ /, ""));
    const name = field("event").join("");
    const ended = [...TERMINAL].find((status) => name.endsWith(status)) || null;
    const data = field("data").join("\n");
    let event = null;
    try {
      event = data ? JSON.parse(data) : null;
    } catch (err) {
      event = null;
    }
    if (name === "preview") {
      showPreview(event);
      return null;
    }
    const record = event && (event.generation || event.record || event.data || event);
    if (!record || typeof record !== "object" || !("status" in record)) return ended;
    renderProgress(record);
    return record.status;
  }

  // A live preview of the latents (event: preview): the same <img> updated in place, step after step.
  function showPreview(p) {
    if (!p || typeof p.image !== "string" || !p.image.startsWith("data:image/jpeg;base64,")) return;
    if (!$("result").hidden) return; // a late preview never covers the finished video
    const img = $("preview");
    img.src = p.image;
    img.dataset.step = String(p.step);
    img.title = `step ${p.step} of ${p.total}`;
    img.hidden = false;
  }

  // The whole record once the stream says it ended: the signed URLs come with the GET.
  async function finish(mine) {
    try {
      const { data } = await call("GET", `/generations/${mine.id}`);
      if (watching === mine) render(data);
      refreshRecent();
    } catch (err) {
      showError(err);
    }
  }

  // "denoising 40 %"; a stage that has not moved the bar yet shows no figure.
  function percent(r) {
    return r.progress > 0 ? ` ${Math.round(r.progress * 100)} %` : "";
  }

  // Where a record or event stands in its generation's life, as a number that only grows: attempt by
  // attempt, queued < running < each stage in the worker's order (then its progress), a re-queue after
  // attempt N before attempt N + 1 runs, and a terminal status last. The stream's time stamps cannot
  // order a record against an event: a record's updated_at does not move with each stage.
  function position(r) {
    if (TERMINAL.has(r.status)) return Infinity;
    const attempt = r.attempt || 0;
    if (r.status !== "running") return attempt > 0 ? attempt + 0.5 : 0;
    const stage = STAGES.indexOf(r.stage);
    return attempt + (stage > 0 ? stage : 0) / 100 + (r.progress || 0) / 1000 + 0.001;
  }

  // A record, or an event of the stream: a status event carries no stage or progress (a running
  // one shows "running" until its first progress event), a progress event no queue position.
  function renderProgress(r) {
    // A state behind the one shown is old news: the stream still delivering "running" after the cancel's
    // answer said "running: denoising" (or "canceled") changes nothing.
    const where = position(r);
    if (where < shown) return;
    shown = where;
    $("current").hidden = false;
    $("placeholder").hidden = true;
    const running = r.status === "running";
    const stage = running && r.stage && r.stage !== "queued" ? r.stage : null;
    let text = stage ? `running: ${stage}${percent(r)}` : r.status;
    if (r.status === "queued" && r.queue_position != null) text += `, ${r.queue_position} ahead in the queue`;
    $("status").textContent = text;
    if (r.status === "succeeded") $("progress").value = 1;
    else if (typeof r.progress === "number") $("progress").value = r.progress;
    const step = stage ? `${stage}${percent(r)}` : r.status;
    const key = stage ? `running:${stage}` : r.status;
    const timeline = $("timeline");
    const last = timeline.lastElementChild;
    if (!last || last.dataset.key !== key) {
      const li = document.createElement("li");
      li.dataset.key = key;
      li.textContent = step;
      timeline.append(li);
    } else {
      last.textContent = step;
    }
    document.body.dataset.status = r.status;
    $("cancel").hidden = TERMINAL.has(r.status);
  }


  function render(r) {
    $("gen-id").textContent = r.id;
    renderProgress(r);
    if (r.status === "succeeded") {
      showResult(r);
    } else {
      $("video").pause(); // the previous clip, hidden, must not keep playing
      $("result").hidden = true;
    }
    if (r.status === "failed" && r.error) showError({ code: r.error.code, message: r.error.message, param: null });
  }

  function showResult(r) {
    const video = r.artifacts.find((a) => a.kind === "video");
    const poster = r.artifacts.find((a) => a.kind === "poster");
    if (!video) return;
    const player = $("video");
    if (player.dataset.generation !== r.id) {
      player.poster = poster ? poster.download_url : "";
      player.src = video.download_url;
      player.dataset.generation = r.id;
    }
    $("actual-prompt").textContent = r.actual_prompt || r.input.prompt;
    const sound = video.audio ? "with audio" : "no audio";
    $("video-facts").textContent = `${video.width}×${video.height}, ${video.duration_seconds} s at ${video.fps} fps, ${sound}`;
    $("final-price").textContent = r.price ? `$${r.price.amount} (hold $${r.price_hold.amount})` : `hold $${r.price_hold.amount}`;
    $("download").href = video.download_url;
    $("download").download = `${r.id}.mp4`;
    $("preview").hidden = true; // the last latent preview gives way to the video
    $("result").hidden = false;
  }

  async function cancel() {
    const id = $("gen-id").textContent;
    if (!id) return;
    clearError();
    try {
      const { data } = await call("POST", `/generations/${id}/cancel`);
      render(data);
      refreshRecent();
    } catch (err) {
      showError(err);
    }
  }

  async function open(id) {
    clearError();
    try {
      const { data, response } = await call("GET", `/generations/${id}`);
      watch(data, response);
      $("current").scrollIntoView({ block: "start" });
    } catch (err) {
      showError(err);
    }
  }

  // Signed URLs are short-lived: a player that fails to load asks for the record (and fresh URLs) again.
  const refreshed = new Set(); // once per generation: a video that is broken stays broken
  async function refreshUrls() {
    const id = $("video").dataset.generation;
    if (!id || refreshed.has(id)) return;
    refreshed.add(id);
    try {
      const { data } = await call("GET", `/generations/${id}`);
      $("video").removeAttribute("data-generation");
      if ($("gen-id").textContent === id) render(data);
    } catch (err) {
      showError(err);
    }
  }

  // ------------------------------------------------------------------ recent generations
  async function refreshRecent() {
    let data;
    try {
      ({ data } = await call("GET", "/generations?limit=12"));
    } catch (err) {
      showError(err);
      return;
    }
    const list = $("recent");
    if (!data.data.length) {
      const li = document.createElement("li");
      li.textContent = "Nothing yet: your generations will show here.";
      list.replaceChildren(li);
      return;
    }
    list.replaceChildren(...data.data.map(recentItem));
  }

  function recentItem(r) {
    const li = document.createElement("li");
    li.dataset.id = r.id;
    li.dataset.status = r.status;
    const button = document.createElement("button");
    button.type = "button";
    button.addEventListener("click", () => open(r.id));
    const poster = r.artifacts.find((a) => a.kind === "poster");
    let picture;
    if (poster) {
      picture = document.createElement("img");
      picture.src = poster.download_url;
      picture.alt = `Poster of ${r.id}`;
      picture.loading = "lazy";
    } else {
      picture = document.createElement("span");
      picture.className = "no-poster";
      picture.textContent = r.status;
    }
    const what = document.createElement("span");
    what.className = "what";
    what.textContent = `${r.model} · ${r.status}`;
    const prompt = document.createElement("span");
    prompt.className = "prompt";
    prompt.textContent = r.input.prompt;
    button.setAttribute("aria-label", `Open ${r.model} generation, ${r.status}: ${r.input.prompt}`);
    button.append(picture, what, prompt);
    li.append(button);
    return li;
  }

  // ------------------------------------------------------------------ start
  async function init() {
    let data;
    try {
      ({ data } = await call("GET", "/models"));
    } catch (err) {
      showError(err);
      return;
    }
    // Runnable models first (a worker hosts them); the others are listed, disabled, with why.
    models = [...data.data.filter((m) => m.available), ...data.data.filter((m) => !m.available)];
    fillModels();
    $("model").addEventListener("change", onModelChange);
    $("mode").addEventListener("change", onModeChange);
    $("variant").addEventListener("change", onVariantChange);
    for (const id of ["resolution", "ratio", "duration", "audio", "prompt-extend", "seed"]) {
      $(id).addEventListener("change", scheduleQuote);
    }
    $("prompt").addEventListener("input", countPrompt);
    // Typed values are quoted as they are typed: a refused one turns Generate off before it is pressed.
    for (const id of ["seed", "negative"]) $(id).addEventListener("input", scheduleQuote);
    $("create-form").addEventListener("submit", submit);
    $("cancel").addEventListener("click", cancel);
    $("refresh").addEventListener("click", refreshRecent);
    $("video").addEventListener("error", refreshUrls);
    onModelChange();
    await refreshRecent();
    document.body.dataset.ready = "true";
  }

  init();
})();
