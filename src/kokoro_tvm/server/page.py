"""The web page at ``/``: text, voice, format and speed in; it plays the speech as it streams.

The audio goes through Media Source Extensions: each piece of the response is appended to the
player as it arrives, so playback starts with the first chunk. Chromium's Media Source takes
MPEG audio and ADTS AAC but not Ogg/Opus, WAV or FLAC, so the page streams mp3 or aac; the API
itself serves every format.

A server started with ``--api-key`` answers the page's API calls 401 until they carry the key:
the page then asks for it, keeps it for this browser tab only (``sessionStorage``) and sends it
as the bearer token, as any other client does. The page itself holds no key: anyone may load
it, and only who knows the key can use it.
"""

# a line ending in a backslash continues on the next one: Python drops both, the page has one line
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kokoro-tvm</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 44rem; \
margin: 2rem auto; padding: 0 1rem; }
  textarea { width: 100%; min-height: 8rem; font: inherit; box-sizing: border-box; }
  .row { display: flex; gap: 0.75rem; align-items: center; flex-wrap: wrap; margin: 0.75rem 0; }
  audio { width: 100%; margin-top: 0.5rem; }
  #status { color: #555; min-height: 1.5em; }
  .error { color: #b00020 !important; }
</style>
</head>
<body>
<h1>kokoro-tvm</h1>
<form id="keyform" hidden>
  <div class="row">
    <label>API key <input id="key" type="password" autocomplete="off"></label>
    <button id="usekey" type="submit">Use key</button>
  </div>
</form>
<form id="form">
  <textarea id="text" aria-label="Text">\
Hello! This page plays the speech while it is being made.</textarea>
  <div class="row">
    <label>Voice <select id="voice"></select></label>
    <label>Format <select id="format"><option value="mp3">mp3</option>\
<option value="aac">aac</option></select></label>
    <label>Speed <input id="speed" type="number" min="0.25" max="4" step="0.05" value="1"></label>
    <button id="speak" type="submit">Speak</button>
  </div>
</form>
<audio id="player" controls></audio>
<p id="status" role="status"></p>
<script>
const MIME = { mp3: "audio/mpeg", aac: "audio/aac" };
const $ = (id) => document.getElementById(id);
const status = (msg, error = false) => { $("status").textContent = msg; \
$("status").className = error ? "error" : ""; };
const KEY = "kokoro-tvm-api-key";

// the API key, once given, as the bearer token of every API call
function withKey(init = {}) {
  const key = sessionStorage.getItem(KEY);
  const headers = { ...(init.headers || {}) };
  if (key) headers.Authorization = `Bearer ${key}`;
  return { ...init, headers };
}

function askKey() {
  $("keyform").hidden = false;
  $("key").focus();
  status("This server needs its API key (kokoro-tvm serve --api-key): enter it above.", true);
}

async function loadVoices() {
  const res = await fetch("/v1/audio/voices?legacy=true", withKey());
  if (res.status === 401) return askKey();
  const doc = await res.json();
  const select = $("voice");
  select.replaceChildren();
  for (const name of doc.voices) {
    const opt = document.createElement("option");
    opt.value = opt.textContent = name;
    select.appendChild(opt);
  }
  const preferred = ["af_heart", "random"].find((v) => doc.voices.includes(v));
  if (preferred) select.value = preferred;
}

function append(buffer, data) {
  return new Promise((resolve, reject) => {
    buffer.addEventListener("updateend", resolve, { once: true });
    buffer.addEventListener("error", reject, { once: true });
    buffer.appendBuffer(data);
  });
}

async function speak(event) {
  event.preventDefault();
  const format = $("format").value;
  const player = $("player");
  const started = performance.now();
  const body = JSON.stringify({
    model: "kokoro", input: $("text").value, voice: $("voice").value,
    response_format: format, speed: Number($("speed").value),
  });
  status("Requesting…");
  const media = new MediaSource();
  player.src = URL.createObjectURL(media);
  await new Promise((resolve) => media.addEventListener("sourceopen", resolve, { once: true }));
  const buffer = media.addSourceBuffer(MIME[format]);
  buffer.mode = "sequence";
  const res = await fetch("/v1/audio/speech", withKey({
    method: "POST", headers: { "Content-Type": "application/json" }, body,
  }));
  if (res.status === 401) return askKey();
  if (!res.ok) {
    const doc = await res.json().catch(() => ({ error: { message: res.statusText } }));
    status(`${res.status}: ${doc.error.message}`, true);
    return;
  }
  player.addEventListener("playing", () => {
    status(`Playing: first audio after ${((performance.now() - started) / 1000).toFixed(2)} s`);
  }, { once: true });
  player.play().catch(() => status("Press play to listen."));
  const reader = res.body.getReader();
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.length;
    await append(buffer, value);
  }
  media.endOfStream();
  status(`${$("status").textContent} (${(bytes / 1024).toFixed(0)} KiB streamed)`);
}

$("form").addEventListener("submit", (e) => speak(e).catch((err) => status(String(err), true)));
$("keyform").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("key").value);
  $("keyform").hidden = true;
  status("");
  loadVoices().catch((err) => status(`Could not list the voices: ${err}`, true));
});
loadVoices().catch((err) => status(`Could not list the voices: ${err}`, true));
</script>
</body>
</html>
"""
