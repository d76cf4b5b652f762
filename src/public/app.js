// The page at `/`: a plain ES module, no framework and no network assets. It drives the service's public API only:
// avatars, models and voices to choose from; a session over WebRTC (with the microphone for hands-free Talk);
// speak, chat, stop, pause/resume; captions and a readable timeline from SSE; portrait upload; recording and
// offline rendering with downloads. Errors become dismissible banners that say what to do. The protocol (requests and
// their errors, WebRTC, SSE, the microphone) is the client library's (`client/avatar-client.ts`, served at /client.js).
import { AvatarApiError, AvatarClient, faceCrop, showLiveCaptions } from '/client.js';

const $ = (id) => document.getElementById(id);

/** Page state; `window.demo` exposes it to tests and the curious (`demo.pc`, `demo.sessionId`). */
const client = new AvatarClient();
const state = {
  client,
  get sessionId() {
    return client.sessionId;
  },
  /** The WebRTC peer receiving the avatar (the client's). */
  get pc() {
    return client.peer;
  },
  meter: null,
  avatars: [],
  models: [],
  paused: false,
  recording: false,
  llmReady: false,
  /** Speech recognition configured and answering (GET /health `asr`): Talk needs it. */
  asrReady: false,
  /** Captions per turn id: what the avatar says in that turn. */
  captions: new Map(),
  currentTurn: null,
  lastAnswer: '',
  /** The `upload_id` of the custom avatar being created, whose phase the page shows. */
  creating: null,
};
window.demo = state;

/** A custom avatar's processing phase is polled this often while it is created. */
const UPLOAD_POLL_MS = 500;
/** Offline render status is polled this often. */
const RENDER_POLL_MS = 500;
/** Timeline entries kept: a long conversation must not grow the page without bound. */
const TIMELINE_MAX = 200;
/** Turns whose captions are kept (the one on screen and the last answer are among them): same reason. */
const CAPTIONS_KEPT = 20;
const BASE_AVATAR_TYPE = 'lipsync';
/** `?debug` in the page's address also offers `mock`, the debug overlay model, which end users have no use for. */
const DEBUG = new URLSearchParams(location.search).has('debug');
const DEBUG_MODELS = ['mock'];
const PREVIEW_TEXT = 'Hello! This is how I sound.';
/** Image types a portrait upload accepts (the file input's `accept` lists the same). */
const PORTRAIT_TYPES = ['image/jpeg', 'image/png', 'image/webp'];
/** Clips (a video avatar: the person's own motion loops while idle); the service checks the bytes either way. */
const CLIP_TYPES = ['video/mp4', 'video/webm', 'video/quicktime'];

// ——— errors and the timeline ———

/** A dismissible banner: what went wrong and what to do about it. */
function banner(message) {
  const box = document.createElement('div');
  box.className = 'banner';
  box.setAttribute('role', 'alert');
  const text = document.createElement('p');
  text.textContent = message;
  const close = document.createElement('button');
  close.type = 'button';
  close.textContent = '×';
  close.setAttribute('aria-label', 'Dismiss error');
  close.onclick = () => box.remove();
  box.append(text, close);
  $('banners').append(box);
}

/** Turns an API failure into advice (a 409 from a busy avatar says to press Stop). */
function explain(error) {
  const { status, detail } = error;
  if (status === 409 && /in flight|call interrupt/.test(detail ?? ''))
    return 'The avatar is still busy with the previous turn: press Stop to interrupt it, or wait until it finishes.';
  if (status === 409 && /paused/.test(detail ?? '')) return 'The session is paused: press Resume first.';
  if (status === 503 && /language model/.test(detail ?? ''))
    return 'Chat needs a language model: set SERVICE_LLM_BASE_URL (docs/llm-asr.md) and restart the service.';
  if (status === 503 && /capacity/.test(detail ?? ''))
    return 'The service is at its session limit: end another session or try again in a few seconds.';
  if (status === 502)
    return `An upstream service failed: ${detail}. Check its URL and key in the service configuration.`;
  if (status === 413) return 'That file is too large: portraits up to 10 MB.';
  if (status === undefined) return `The service did not answer (${error.message}): is it still running?`;
  return detail ?? error.message;
}

function fail(error) {
  banner(explain(error));
  timeline(`error: ${error.detail ?? error.message}`);
}

function timeline(text, { latency = false } = {}) {
  const item = document.createElement('li');
  const time = document.createElement('time');
  time.textContent = new Date().toLocaleTimeString();
  const body = document.createElement('span');
  body.textContent = text;
  if (latency) body.className = 'latency';
  item.append(time, body);
  const list = $('timeline');
  list.append(item);
  while (list.children.length > TIMELINE_MAX) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
}

/** One JSON request through the client library: `{data, turnId}`, or an AvatarApiError with the service's detail. */
const api = (method, path, body) => client.request(method, path, body);

// ——— catalog: avatars, models, voices, what is configured ———

function selectedAvatar() {
  const id = document.querySelector('#avatars input:checked')?.value;
  return state.avatars.find((a) => a.id === id);
}

function renderAvatars(selectId) {
  const group = $('avatars');
  group.replaceChildren();
  for (const avatar of state.avatars) {
    const label = document.createElement('label');
    const input = document.createElement('input');
    input.type = 'radio';
    input.name = 'avatar';
    input.value = avatar.id;
    input.onchange = () => {
      renderModels();
      void showAvatarPreview();
    };
    const img = document.createElement('img');
    img.src = `/avatars/${encodeURIComponent(avatar.id)}/preview`;
    img.alt = '';
    img.loading = 'lazy';
    const name = document.createElement('span');
    name.textContent = avatar.name ?? avatar.id;
    label.append(input, img, name);
    if (avatar.animated === false) {
      // A photo without a usable face: the avatar speaks, but its mouth does not move.
      const still = document.createElement('span');
      still.className = 'still';
      still.textContent = '(still image)';
      label.append(still);
    }
    group.append(label);
  }
  const inputs = [...group.querySelectorAll('input')];
  const chosen =
    inputs.find((i) => i.value === selectId) ??
    inputs.find((i) => state.avatars.find((a) => a.id === i.value)?.model_type === BASE_AVATAR_TYPE) ??
    inputs[0];
  if (chosen) chosen.checked = true;
  renderModels();
  void showAvatarPreview();
}

/**
 * Before a session (and after it) the stage shows the chosen avatar's preview; photo avatars are cropped to
 * their face (the client library's `faceCrop`), live video and preview alike.
 */
async function showAvatarPreview() {
  const avatar = selectedAvatar();
  $('avatar-actions').hidden = !avatar?.is_custom;
  if (!avatar || client.sessionId) return;
  const video = $('video');
  video.poster = `/avatars/${encodeURIComponent(avatar.id)}/preview`;
  try {
    const { data: manifest } = await api('GET', `/avatars/${encodeURIComponent(avatar.id)}`);
    if (selectedAvatar()?.id === avatar.id && !client.sessionId) frameVideo(manifest);
  } catch {
    frameVideo(null);
  }
}

/** Crops the video element to the avatar's face (or shows the whole frame). */
function frameVideo(manifest) {
  const crop = manifest ? faceCrop(manifest) : null;
  Object.assign($('video').style, crop ?? { left: '0', top: '0', width: '100%', height: '100%' });
}

/** Only models that can render the chosen avatar; those not connected are listed but disabled, with why. */
function renderModels() {
  const avatar = selectedAvatar();
  const select = $('model');
  select.replaceChildren();
  const usable = state.models.filter(
    (m) => avatar && m.renders.includes(avatar.model_type) && (DEBUG || !DEBUG_MODELS.includes(m.id)),
  );
  for (const model of usable) {
    const option = new Option(model.connected ? model.id : `${model.id} (${model.status.replace('_', ' ')})`, model.id);
    option.disabled = !model.connected;
    select.append(option);
  }
  const preferred = usable.find((m) => m.connected && m.id === avatar?.model_type) ?? usable.find((m) => m.connected);
  if (preferred) select.value = preferred.id;
}

/** The service's avatar list into `state.avatars` (drawn by `renderAvatars`). */
async function fetchAvatars() {
  state.avatars = (await api('GET', '/avatars')).data;
}

async function loadAvatars(selectId) {
  await fetchAvatars();
  renderAvatars(selectId ?? selectedAvatar()?.id);
}

/**
 * The first avatar list, asked for as the page loads (`loadCatalog`). A portrait chosen before it arrived waits for
 * it: its upload names a base avatar from that list. Rejects when the list did not load (the catalog's banner says so).
 */
let firstAvatarList = Promise.resolve();

async function loadCatalog() {
  firstAvatarList = fetchAvatars();
  const [{ data: models }, { data: voices }, health] = await Promise.all([
    api('GET', '/models'),
    api('GET', '/tts/voices'),
    api('GET', '/health')
      .then((r) => r.data)
      .catch(() => null),
    firstAvatarList,
  ]);
  state.models = models.models;
  renderAvatars(selectedAvatar()?.id);
  const select = $('voice');
  select.replaceChildren();
  for (const provider of voices.providers.filter((p) => p.configured && p.voices.length > 0)) {
    const group = document.createElement('optgroup');
    group.label = provider.service ? `${provider.service} (${provider.id})` : provider.id;
    for (const voice of provider.voices) {
      const details = [voice.language, voice.gender, voice.source === 'clone' ? 'cloned' : null]
        .filter(Boolean)
        .join(', ');
      const option = new Option(
        voice.description ?? `${voice.name ?? voice.id}${details ? ` (${details})` : ''}`,
        `${provider.id}|${voice.id}`,
      );
      if (provider.is_default && voice.id === provider.default_voice) option.selected = true;
      group.append(option);
    }
    select.append(group);
  }
  // Every provider id with the service behind it and whether it is set up, folded away under a one-line count.
  const services = $('voice-services');
  const configured = voices.providers.filter((p) => p.configured).length;
  services.querySelector('summary').textContent =
    `Voice services: ${configured} of ${voices.providers.length} configured`;
  services.querySelector('ul').replaceChildren(
    ...voices.providers.map((p) => {
      const item = document.createElement('li');
      item.textContent = `${p.service ?? p.id} (${p.id}): ${p.configured ? 'configured' : 'not configured, see docs/providers.md'}`;
      return item;
    }),
  );
  services.hidden = false;
  const llm = health?.components?.llm;
  state.llmReady = llm?.status === 'ok';
  if (!state.llmReady) {
    $('chat-hint').textContent =
      llm?.status === 'error'
        ? `Chat is off: the language model does not answer (${llm.reason}).`
        : 'Chat is off: no language model is configured. Set SERVICE_LLM_BASE_URL (see docs/llm-asr.md) and restart.';
  }
  const asr = health?.components?.asr;
  state.asrReady = asr?.status === 'ok';
  if (!state.asrReady) {
    $('talk-hint').textContent =
      asr?.status === 'error'
        ? `Talk is off: speech recognition does not answer (${asr.reason}).`
        : 'Talk is off: no speech recognition is configured. Set SERVICE_ASR_BASE_URL (see docs/llm-asr.md) and restart.';
    $('talk-hint').classList.add('warn');
  }
  if (!state.llmReady) $('chat-hint').classList.add('warn');
  setRunning(false);
}

function voiceChoice() {
  const [provider, voice] = ($('voice').value || '|').split('|');
  return provider ? { tts_provider: provider, tts_voice: voice || null } : {};
}

async function previewVoice() {
  const choice = voiceChoice();
  const button = $('preview-voice');
  button.disabled = true;
  try {
    const res = await fetch('/tts/preview', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: PREVIEW_TEXT, voice: choice.tts_voice, tts_provider: choice.tts_provider }),
    });
    if (!res.ok)
      throw new AvatarApiError('POST', '/tts/preview', res.status, (await res.json().catch(() => ({}))).detail);
    const audio = new Audio(URL.createObjectURL(await res.blob()));
    $('preview-status').textContent =
      `Playing a preview of ${$('voice').selectedOptions[0]?.textContent ?? 'the voice'}`;
    audio.onended = () => ($('preview-status').textContent = '');
    await audio.play().catch(() => undefined);
  } catch (error) {
    fail(error);
  } finally {
    button.disabled = false;
  }
}

// ——— the session ———

function setRunning(running) {
  const live = running && client.sessionId !== null;
  $('start').disabled = live;
  $('stop').disabled = !live;
  for (const id of ['speak', 'interrupt', 'pause', 'record']) $(id).disabled = !live;
  $('talk').disabled = !live || !state.asrReady;
  $('chat').disabled = !live || !state.llmReady;
  $('render').disabled = !live || !state.lastAnswer;
  if (!live) {
    stopMicrophone();
    state.paused = false;
    state.recording = false;
    $('pause').textContent = 'Pause';
    $('record').textContent = 'Start recording';
    // The live picture goes; the chosen avatar's preview comes back.
    $('video').srcObject = null;
    client.canvas?.remove();
    for (const track of remote.getTracks()) remote.removeTrack(track);
    void showAvatarPreview();
  }
}

async function start() {
  // Disabled until this attempt ends: a double click must not create (and leak) a second session.
  $('start').disabled = true;
  try {
    const avatar = selectedAvatar();
    const prompt = $('system-prompt').value.trim();
    // The switch: the face drawn here from the render kit and the pose stream, or sent as video (docs/embedding.md).
    client.useRendering($('render-client').checked ? 'client' : 'server');
    if (client.canvas) {
      client.canvas.setAttribute('aria-label', 'Avatar');
      Object.assign(client.canvas.style, {
        left: $('video').style.left,
        top: $('video').style.top,
        width: $('video').style.width,
        height: $('video').style.height,
      });
      $('video').after(client.canvas);
    }
    await client.createSession({
      avatar_id: avatar?.id,
      model: $('model').value,
      ...voiceChoice(),
      ...(prompt ? { llm_system_prompt: prompt } : {}),
    });
    $('state').textContent = 'created';
    await client.connect();
    await client.start();
    $('state').textContent = 'running';
    setRunning(true);
    timeline(`session started: ${avatar?.name ?? avatar?.id} with ${$('model').value}`);
  } catch (error) {
    fail(error);
    // A half-set-up session (created, offer or start failed) is ended rather than left to time out.
    void endSession();
    setRunning(false);
  }
}

/** The avatar's tracks (from each new peer: talking offers again) play in the video element. */
const remote = new MediaStream();
client.on('track', ({ track }) => {
  for (const old of remote.getTracks().filter((t) => t.kind === track.kind)) remote.removeTrack(old);
  remote.addTrack(track);
  $('video').srcObject = remote;
});

/** Talk: the microphone (echo-cancelled by the browser) goes to the avatar; pressing again mutes it. */
async function toggleTalk() {
  const button = $('talk');
  if (client.microphone) {
    const track = client.microphone.getAudioTracks()[0];
    track.enabled = !track.enabled;
    button.setAttribute('aria-pressed', String(track.enabled));
    timeline(track.enabled ? 'microphone on' : 'microphone muted');
    return;
  }
  button.disabled = true;
  try {
    watchMicLevel(await client.talk());
    button.setAttribute('aria-pressed', 'true');
    timeline('microphone on: talk to the avatar, talk over it to interrupt');
  } catch (error) {
    if (error instanceof AvatarApiError) fail(error);
    else
      banner(
        `The microphone is not available (${error.message}): allow microphone access for this page and press Talk again.`,
      );
    stopMicrophone();
  } finally {
    button.disabled = !client.sessionId || !state.asrReady;
  }
}

/** The live microphone level (RMS of the last analyser window) on the meter. */
function watchMicLevel(mic) {
  const context = new AudioContext();
  const analyser = context.createAnalyser();
  analyser.fftSize = 1024;
  context.createMediaStreamSource(mic).connect(analyser);
  const samples = new Float32Array(analyser.fftSize);
  const timer = setInterval(() => {
    analyser.getFloatTimeDomainData(samples);
    let sum = 0;
    for (const s of samples) sum += s * s;
    $('mic-level').value = Math.min(1, Math.sqrt(sum / samples.length) * 4);
  }, 100);
  state.meter = { context, timer };
}

function stopMicrophone() {
  client.stopTalking();
  if (state.meter) {
    clearInterval(state.meter.timer);
    void state.meter.context.close();
    state.meter = null;
  }
  $('mic-level').value = 0;
  $('talk').setAttribute('aria-pressed', 'false');
}

/** Ends the current session, if any. `keepalive` lets the request outlive the page (pagehide). */
function endSession({ keepalive = false } = {}) {
  return client.end({ keepalive }).catch(() => undefined);
}

// ——— what the avatar does: SSE ———

const STAGE_TEXT = {
  listening: 'listening',
  thinking: 'thinking',
  speaking: 'speaking',
  idle: 'idle',
  interrupted: 'interrupted',
  error: 'error',
};

function showStage(stage) {
  $('stage').textContent = STAGE_TEXT[stage] ?? stage;
  $('badge').dataset.stage = stage;
}

/** Makes `turnId` the turn on screen, showing `text` as its captions. */
function showCaptions(turnId, text) {
  state.captions.set(turnId, text);
  if (state.captions.size > CAPTIONS_KEPT) state.captions.delete(state.captions.keys().next().value);
  state.currentTurn = turnId;
  $('captions').textContent = text;
}

/** Words arriving for a turn (`llm` deltas) make it the one on screen: the avatar says them now. */
function appendCaption(turnId, delta) {
  showCaptions(turnId, (state.captions.get(turnId) ?? '') + delta);
}

/**
 * The turn a request just started (its `X-Turn-Id`) goes on screen. Its SSE events travel on the event stream,
 * not on the request's connection, so they may have arrived before this answer did: a chat's whole reply can be
 * in its captions already. Those words are kept; `initial` only fills a turn that has none yet.
 */
function openTurn(turnId, initial) {
  showCaptions(turnId, state.captions.get(turnId) || initial);
}

/** The session's SSE events (the client opens, parses and reopens the stream), for every session of the page. */
function listen() {
  const on = (type, handler) => client.on(type, handler);
  // Each sentence over the video as it is heard (SSE `caption`); the text panel keeps the model's words as they come.
  showLiveCaptions(client, $('video').parentElement);
  on('status', (data) => {
    showStage(data.stage);
    if (
      data.turn_id &&
      ['listening', 'thinking', 'speaking'].includes(data.stage) &&
      data.turn_id !== state.currentTurn
    ) {
      state.currentTurn = data.turn_id;
      $('captions').textContent = state.captions.get(data.turn_id) ?? '';
    }
    if (data.stage !== 'speaking' || data.turn_id)
      timeline(`avatar ${data.stage}${data.message ? ` (${data.message})` : ''}`);
    if (data.stage === 'idle' && data.turn_id) void showTurnLatency(client.sessionId, data.turn_id);
    if (data.stage === 'idle' && (data.message === 'paused' || data.message === 'resumed'))
      showPaused(data.message === 'paused');
  });
  on('transcript', (data) => {
    if (data.is_final) timeline(`you said: “${data.text}”`);
  });
  on('llm', (data) => appendCaption(data.turn_id, data.delta));
  on('tts', (data) => {
    if (data.stage === 'first_audio') timeline(`first audio synthesised after ${data.ms_elapsed} ms`);
  });
  on('error', (data) => {
    banner(`${data.message} (${data.code})`);
    timeline(`error ${data.code}: ${data.message}`);
  });
  on('session.terminated', () => {
    // Ended by the service (or another tab): nothing left to delete on pagehide.
    client.disconnect();
    client.sessionId = null;
    setRunning(false);
    $('state').textContent = 'terminated';
    showStage('idle');
    timeline('session ended');
  });
}

/** The service's own figure for the turn (GET /sessions/{id}/metrics): end of speech or request → first audio. */
async function showTurnLatency(sessionId, turnId) {
  try {
    const { data } = await api('GET', `/sessions/${sessionId}/metrics`);
    const turn = data.turns.find((t) => t.turn_id === turnId);
    const answer = state.captions.get(turnId);
    if (answer) {
      state.lastAnswer = answer;
      $('render').disabled = !state.sessionId;
    }
    if (!turn || turn.first_sample_sent_ms === null) return;
    const from = turn.mode === 'voice' ? 'end of speech' : `${turn.mode} request`;
    const parts = [`${from} → first audio ${turn.first_sample_sent_ms} ms`];
    if (turn.llm_first_token_ms !== null) parts.push(`first LLM token ${turn.llm_first_token_ms} ms`);
    if (turn.interrupt_to_flush_ms !== null) parts.push(`interrupt → silence ${turn.interrupt_to_flush_ms} ms`);
    timeline(`turn ${turn.outcome}: ${parts.join(', ')}`, { latency: true });
  } catch {
    // The session may have ended meanwhile; the figure is a nicety.
  }
}

// ——— conversation controls ———

async function say(kind) {
  const text = $('text').value.trim();
  if (!text) {
    banner('Type a message first.');
    return;
  }
  try {
    const turnId = kind === 'chat' ? await client.chat(text) : await client.speak(text);
    // A speak turn says the text as written; a chat turn's captions are its reply, filled by `llm` events.
    openTurn(turnId, kind === 'speak' ? text : '');
    timeline(kind === 'chat' ? `you asked: “${text}”` : `speak: “${text}”`);
  } catch (error) {
    fail(error);
  }
}

/** Pause and resume may come from this page or from anyone else using the API (the SSE `idle` says which). */
function showPaused(paused) {
  state.paused = paused;
  $('pause').textContent = paused ? 'Resume' : 'Pause';
  $('state').textContent = paused ? 'paused' : 'running';
}

async function togglePause() {
  const resume = state.paused;
  try {
    await (resume ? client.resume() : client.pause());
    showPaused(!resume);
    timeline(state.paused ? 'session paused' : 'session resumed');
  } catch (error) {
    fail(error);
  }
}

async function applyPrompt() {
  const prompt = $('system-prompt').value.trim();
  if (!state.sessionId || !prompt) return;
  try {
    await api('POST', `/sessions/${state.sessionId}/customize/prompt`, { system_prompt: prompt });
    timeline('system prompt updated for the next turns');
  } catch (error) {
    fail(error);
  }
}

async function applyVoice() {
  if (!state.sessionId) return;
  try {
    await api('POST', `/sessions/${state.sessionId}/customize`, voiceChoice());
    timeline(`voice: ${$('voice').selectedOptions[0]?.textContent}`);
  } catch (error) {
    fail(error);
  }
}

// ——— recording and offline rendering ———

async function toggleRecording() {
  const button = $('record');
  button.disabled = true;
  try {
    if (!state.recording) {
      await api('POST', `/sessions/${state.sessionId}/rt-recording/start`);
      state.recording = true;
      button.textContent = 'Stop recording';
      $('recording-link').hidden = true;
      timeline('recording started');
    } else {
      const { data } = await api('POST', `/sessions/${state.sessionId}/rt-recording/stop`);
      state.recording = false;
      button.textContent = 'Start recording';
      const link = $('recording-link');
      link.href = data.artifact_url;
      link.hidden = false;
      timeline(`recording saved (${(data.duration_ms / 1000).toFixed(1)} s)`);
    }
  } catch (error) {
    fail(error);
  } finally {
    button.disabled = !state.sessionId;
  }
}

async function renderOffline() {
  const text = state.lastAnswer;
  if (!text) return;
  const sessionId = state.sessionId;
  const progress = $('render-progress');
  const button = $('render');
  button.disabled = true;
  $('render-link').hidden = true;
  progress.hidden = false;
  progress.value = 0;
  try {
    const { data } = await api('POST', `/sessions/${sessionId}/rt-offline-bundle`, { text });
    timeline('offline render queued');
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, RENDER_POLL_MS));
      const { data: job } = await api('GET', `/sessions/${sessionId}/rt-offline-bundle/${data.job_id}`);
      progress.value = job.progress;
      if (job.status === 'failed')
        throw new AvatarApiError('GET', 'offline job', 500, `the offline render failed: ${job.error}`);
      if (job.status === 'complete') break;
    }
    const link = $('render-link');
    link.href = `/sessions/${sessionId}/rt-offline-bundle/${data.job_id}/download`;
    link.hidden = false;
    timeline('offline render complete');
  } catch (error) {
    fail(error);
  } finally {
    button.disabled = !state.sessionId;
  }
}

// ——— new avatar from a portrait ———

async function uploadPortrait(file) {
  if (!file) return;
  if (state.avatars.length === 0) {
    // Chosen before the page had the avatar list (on a slow service the file picker can beat it).
    $('upload-status').textContent = `Waiting for the service’s avatars before uploading ${file.name}…`;
    const listed = await firstAvatarList.then(
      () => true,
      () => false,
    );
    $('upload-status').textContent = '';
    if (!listed) {
      banner(`${file.name} was not uploaded: the page could not load the service's avatars. Reload the page.`);
      return;
    }
  }
  const base = state.avatars.find((a) => a.model_type === BASE_AVATAR_TYPE);
  if (!base) {
    banner('No photo avatar to base a portrait on: the avatars directory has no lipsync avatar.');
    return;
  }
  const form = new FormData();
  form.set('name', $('portrait-name').value.trim() || 'My avatar');
  form.set('base_avatar_id', base.id);
  // A clip makes a video avatar; the service reads the format from the bytes.
  // Under this id the service reports the processing phase while the request runs (GET /avatars/custom/uploads/{id}).
  const uploadId = crypto.randomUUID();
  form.set('upload_id', uploadId);
  form.set(CLIP_TYPES.includes(file.type) ? 'video' : 'image', file);
  let polling = null;
  state.creating = uploadId;
  const progress = $('upload-progress');
  progress.hidden = false;
  progress.value = 0;
  $('upload-status').textContent = `Uploading ${file.name}…`;
  // XMLHttpRequest: fetch cannot report upload progress.
  const request = new XMLHttpRequest();
  request.open('POST', '/avatars/custom');
  request.upload.onprogress = (ev) => {
    if (ev.lengthComputable) progress.value = ev.loaded / ev.total;
  };
  // Answered or failed: a phase poll still on its way must not write over what the page says next.
  const finished = () => {
    clearInterval(polling);
    if (state.creating === uploadId) state.creating = null;
  };
  request.onload = async () => {
    finished();
    let body = null;
    try {
      body = JSON.parse(request.responseText);
    } catch {
      // not JSON
    }
    if (request.status !== 200) {
      progress.hidden = true;
      $('upload-status').textContent = '';
      fail(new AvatarApiError('POST', '/avatars/custom', request.status, body?.detail ?? request.statusText));
      return;
    }
    progress.value = 1;
    // A picture without a usable face still makes an avatar, but one whose mouth never moves: say so, and why.
    $('upload-status').textContent =
      body.animated === false
        ? `New avatar “${body.name}” is ready as a still image: its mouth will not move. ${body.reason ?? ''}`.trim()
        : `New avatar “${body.name}” is ready: it is selected above.`;
    $('upload-status').classList.toggle('warn', body.animated === false);
    timeline(`new avatar ${body.name} created${body.animated === false ? ' (still image)' : ''}`);
    await loadAvatars(body.id).catch(fail);
  };
  request.onerror = () => {
    finished();
    fail(new Error('the upload did not reach the service'));
  };
  // Every byte sent: the service now decodes the file and looks for the face (a clip takes a while); it says
  // which phase it is in until it answers.
  request.upload.onload = () => {
    progress.removeAttribute('value');
    $('upload-status').textContent = `Uploaded ${file.name}; waiting for the service…`;
    polling = setInterval(() => void showCreationPhase(uploadId, file.name), UPLOAD_POLL_MS);
  };
  request.send(form);
}

const CREATION_PHASE_TEXT = {
  processing: {
    image: 'finding the face in the picture',
    video: 'decoding the clip and following the face in every frame',
  },
  saving: { image: 'saving the new avatar', video: 'saving the new avatar' },
};

/** The service's phase of a creation still running (404 once it answered: its answer is then on the page). */
async function showCreationPhase(uploadId, fileName) {
  try {
    const { data } = await api('GET', `/avatars/custom/uploads/${uploadId}`);
    if (state.creating !== uploadId) return;
    $('upload-status').textContent =
      `Processing ${fileName} on the service: ${CREATION_PHASE_TEXT[data.phase]?.[data.kind] ?? data.phase}…`;
  } catch {
    // Not yet processing, or already answered.
  }
}

async function renameAvatar() {
  const avatar = selectedAvatar();
  if (!avatar?.is_custom) return;
  const name = prompt('New name for the avatar', avatar.name ?? avatar.id)?.trim();
  if (!name || name === avatar.name) return;
  try {
    await api('PATCH', `/avatars/${encodeURIComponent(avatar.id)}`, { name });
    timeline(`avatar ${avatar.name} renamed to ${name}`);
    await loadAvatars(avatar.id);
  } catch (error) {
    fail(error);
  }
}

async function deleteAvatar() {
  const avatar = selectedAvatar();
  if (!avatar?.is_custom || !confirm(`Delete the avatar “${avatar.name ?? avatar.id}”? This cannot be undone.`)) return;
  try {
    await api('DELETE', `/avatars/${encodeURIComponent(avatar.id)}`);
    timeline(`avatar ${avatar.name} deleted`);
    await loadAvatars(null);
  } catch (error) {
    fail(error);
  }
}

// ——— wiring ———

$('start').onclick = start;
$('rename-avatar').onclick = () => void renameAvatar();
$('delete-avatar').onclick = () => void deleteAvatar();
$('speak').onclick = () => void say('speak');
$('chat').onclick = () => void say('chat');
$('talk').onclick = () => void toggleTalk();
$('pause').onclick = () => void togglePause();
$('record').onclick = () => void toggleRecording();
$('render').onclick = () => void renderOffline();
$('preview-voice').onclick = () => void previewVoice();
$('voice').onchange = () => void applyVoice();
$('system-prompt').onchange = () => void applyPrompt();
$('portrait-file').onchange = (ev) => void uploadPortrait(ev.target.files[0]);
$('interrupt').onclick = () =>
  client
    .interrupt()
    .then(() => timeline('stopped'))
    .catch(fail);
$('stop').onclick = async () => {
  $('stop').disabled = true;
  await endSession();
  $('state').textContent = 'terminated';
  showStage('idle');
  setRunning(false);
};
// Drag and drop of a portrait; the file input in the zone is the keyboard alternative. Cancelling dragenter and
// dragover is what makes the zone a drop target; cancelling drop keeps the browser from opening the file instead.
const zone = $('dropzone');
for (const type of ['dragenter', 'dragover']) {
  zone.addEventListener(type, (ev) => {
    ev.preventDefault();
    zone.classList.add('over');
  });
}
zone.addEventListener('dragleave', (ev) => {
  // Leaving for one of the zone's own children is still over the zone.
  if (!zone.contains(ev.relatedTarget)) zone.classList.remove('over');
});
zone.addEventListener('drop', (ev) => {
  ev.preventDefault();
  zone.classList.remove('over');
  const file = ev.dataTransfer?.files?.[0];
  if (!file) return;
  if (!PORTRAIT_TYPES.includes(file.type) && !CLIP_TYPES.includes(file.type)) {
    banner(
      `“${file.name}” is not a photo or clip the service reads: drop a JPEG, PNG or WebP portrait, or an MP4, MOV or WebM clip.`,
    );
    return;
  }
  void uploadPortrait(file);
});
// Closing or leaving the tab ends the session at once, instead of leaving it to the orphan timeout.
window.addEventListener('pagehide', () => void endSession({ keepalive: true }));
window.addEventListener('pageshow', (event) => {
  // Restored from the back/forward cache: the session was ended on pagehide.
  if (event.persisted) {
    $('state').textContent = 'none';
    setRunning(false);
  }
});
listen();
loadCatalog().catch(fail);
