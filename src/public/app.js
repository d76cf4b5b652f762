// Demo client: creates a session, connects WebRTC, speaks, chats, interrupts and shows SSE events.
const $ = (id) => document.getElementById(id);
const state = { sessionId: null, pc: null, events: null, speakAt: 0, mic: null };
window.demo = state;

function log(line) {
  const el = $('log');
  el.textContent += `${new Date().toISOString().slice(11, 23)} ${line}\n`;
  el.scrollTop = el.scrollHeight;
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${method} ${path} → ${res.status}: ${data?.detail ?? text}`);
  return data;
}

async function loadCatalog() {
  const [avatars, { models }] = await Promise.all([api('GET', '/avatars'), api('GET', '/models')]);
  $('avatar').innerHTML = avatars.map((a) => `<option value="${a.id}" data-type="${a.model_type}">${a.name ?? a.id} (${a.model_type})</option>`).join('');
  $('model').innerHTML = models
    .map((m) => `<option value="${m.id}" ${m.connected ? '' : 'disabled'} data-renders="${m.renders.join(',')}">${m.id}${m.connected ? '' : ` – ${m.status}`}</option>`)
    .join('');
  const pickModel = () => {
    const type = $('avatar').selectedOptions[0]?.dataset.type;
    const preferred = [...$('model').options].find((o) => !o.disabled && o.value === type) ?? [...$('model').options].find((o) => !o.disabled && o.dataset.renders.split(',').includes(type));
    if (preferred) $('model').value = preferred.value;
  };
  $('avatar').onchange = pickModel;
  pickModel();
}

function setRunning(running) {
  $('start').disabled = running;
  $('stop').disabled = !running;
  for (const id of ['speak', 'chat', 'interrupt', 'talk']) $(id).disabled = !running;
  if (!running) stopMicrophone();
}

async function start() {
  // Disabled until this attempt ends: a double click must not create (and leak) a second session.
  $('start').disabled = true;
  try {
    const { session_id } = await api('POST', '/sessions', { avatar_id: $('avatar').value, model: $('model').value });
    state.sessionId = session_id;
    $('state').textContent = 'created';
    listen(session_id);
    await connectPeer(session_id);
    await api('POST', `/sessions/${session_id}/start`);
    $('state').textContent = 'running';
    setRunning(true);
    log(`session ${session_id} running`);
  } catch (error) {
    log(`error: ${error.message}`);
    // A half-set-up session (created, offer or start failed) is ended rather than left to time out.
    endSession();
    setRunning(false);
  }
}

/**
 * One WebRTC peer for the session; with `mic` its audio section is sendrecv and carries the microphone
 * (hands-free conversation). A new offer replaces the session's previous peer, so talking reconnects.
 */
async function connectPeer(sessionId, mic = null) {
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  if (mic) pc.addTransceiver(mic.getAudioTracks()[0], { direction: 'sendrecv', streams: [mic] });
  else pc.addTransceiver('audio', { direction: 'recvonly' });
  const stream = new MediaStream();
  pc.ontrack = (ev) => {
    stream.addTrack(ev.track);
    $('video').srcObject = stream;
  };
  await pc.setLocalDescription(await pc.createOffer());
  await waitForIce(pc);
  const answer = await api('POST', `/sessions/${sessionId}/webrtc/offer`, { sdp: pc.localDescription.sdp, type: 'offer' });
  await pc.setRemoteDescription(answer);
  const previous = state.pc;
  state.pc = pc;
  previous?.close();
}

/** Talk: the microphone (echo-cancelled by the browser) goes to the avatar; pressing again mutes it. */
async function toggleTalk() {
  const button = $('talk');
  if (state.mic) {
    const track = state.mic.getAudioTracks()[0];
    track.enabled = !track.enabled;
    button.setAttribute('aria-pressed', String(track.enabled));
    log(track.enabled ? 'microphone on' : 'microphone muted');
    return;
  }
  button.disabled = true;
  try {
    const mic = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
    state.mic = mic;
    await connectPeer(state.sessionId, mic);
    button.setAttribute('aria-pressed', 'true');
    log('microphone on: talk to the avatar, talk over it to interrupt');
  } catch (error) {
    log(`error: ${error.message}`);
    stopMicrophone();
  } finally {
    button.disabled = !state.sessionId;
  }
}

function stopMicrophone() {
  for (const track of state.mic?.getTracks() ?? []) track.stop();
  state.mic = null;
  $('talk').setAttribute('aria-pressed', 'false');
}

/** Ends the current session, if any. `keepalive` lets the request outlive the page (pagehide). */
function endSession({ keepalive = false } = {}) {
  const sessionId = state.sessionId;
  state.sessionId = null;
  state.events?.close();
  state.pc?.close();
  if (!sessionId) return Promise.resolve();
  return fetch(`/sessions/${sessionId}`, { method: 'DELETE', keepalive }).catch((e) => log(`error: ${e.message}`));
}

function waitForIce(pc) {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 2000);
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState === 'complete') {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

function listen(sessionId) {
  const events = new EventSource(`/sessions/${sessionId}/events`);
  state.events = events;
  let frames = 0;
  for (const type of ['transcript', 'llm', 'tts', 'status', 'error', 'session.terminated']) {
    events.addEventListener(type, (ev) => {
      const data = JSON.parse(ev.data);
      if (type === 'status') $('stage').textContent = data.stage;
      if (type === 'status' && data.stage === 'idle') showTurnMetrics(sessionId);
      if (type === 'tts' && data.stage === 'first_audio' && state.speakAt) {
        $('metrics').innerHTML = `<span>request → first audio: ${Math.round(performance.now() - state.speakAt)} ms</span><span>synthesis: ${data.ms_elapsed} ms</span>`;
      }
      if (type === 'session.terminated') {
        events.close();
        // Ended by the service (or another tab): nothing left to delete on pagehide.
        if (state.sessionId === sessionId) state.sessionId = null;
        setRunning(false);
        $('state').textContent = 'terminated';
      }
      log(`${type} ${ev.data}`);
    });
  }
  events.addEventListener('frame', () => {
    frames++;
    if (frames % 25 === 0) log(`frame ×25 (total ${frames})`);
  });
}

/** The service's own latency figures for the last turn (GET /sessions/{id}/metrics). */
async function showTurnMetrics(sessionId) {
  try {
    const m = await api('GET', `/sessions/${sessionId}/metrics`);
    const turn = m.turns.at(-1);
    if (!turn) return;
    const parts = [`server: first sample sent ${turn.first_sample_sent_ms ?? '–'} ms`];
    if (turn.llm_first_token_ms !== null) parts.push(`LLM first token ${turn.llm_first_token_ms} ms`);
    if (turn.interrupt_to_flush_ms !== null) parts.push(`interrupt → silence queued ${turn.interrupt_to_flush_ms} ms`);
    parts.push(`late frames ${m.media.frames_late}/${m.media.frames_sent}`);
    $('metrics').innerHTML += `<div>${parts.map((p) => `<span>${p}</span>`).join('')}</div>`;
  } catch (error) {
    log(`metrics: ${error.message}`);
  }
}

async function speak(kind) {
  const text = $('text').value.trim();
  if (!text) return;
  state.speakAt = performance.now();
  try {
    if (kind === 'chat') await api('POST', `/sessions/${state.sessionId}/chat`, { prompt: text });
    else await api('POST', `/sessions/${state.sessionId}/speak`, { text });
  } catch (error) {
    log(`error: ${error.message}`);
  }
}

$('start').onclick = start;
$('speak').onclick = () => speak('speak');
$('chat').onclick = () => speak('chat');
$('talk').onclick = () => void toggleTalk();
$('interrupt').onclick = () => api('POST', `/sessions/${state.sessionId}/interrupt`).catch((e) => log(`error: ${e.message}`));
$('stop').onclick = async () => {
  $('stop').disabled = true;
  await endSession();
  $('state').textContent = 'terminated';
  setRunning(false);
};
// Closing or leaving the tab ends the session at once, instead of leaving it to the orphan timeout.
window.addEventListener('pagehide', () => void endSession({ keepalive: true }));
window.addEventListener('pageshow', (event) => {
  // Restored from the back/forward cache: the session was ended on pagehide.
  if (event.persisted) {
    $('state').textContent = 'none';
    setRunning(false);
  }
});
loadCatalog().catch((error) => log(`error: ${error.message}`));
