// Runs in the page: an <avatar-chat> from the service's /widget.js, the heard audio's RMS envelope and every presented
// video frame (as a JPEG, with the time the compositor shows it). Plain JavaScript on purpose, like browser-sync.page.js.
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- read as source text and sent to the page
async function mouthSyncPage({ avatar }) {
  const bench = { audio: [], frames: [], latencies: [], recording: false, sessionId: null, error: null };
  window.bench = bench;
  await new Promise((resolve, reject) => {
    const script = document.createElement('script');
    script.src = '/widget.js';
    script.onload = resolve;
    script.onerror = () => reject(new Error('widget.js did not load'));
    document.head.appendChild(script);
  });
  await customElements.whenDefined('avatar-chat');
  const element = document.createElement('avatar-chat');
  element.setAttribute('avatar', avatar);
  element.setAttribute('model', 'lipsync');
  element.addEventListener('ready', (e) => (bench.sessionId = e.detail.sessionId));
  element.addEventListener('error', (e) => (bench.error = e.detail && e.detail.message));
  document.body.appendChild(element);
  await element.start();
  const video = element.shadowRoot.querySelector('video');
  const audioCtx = new AudioContext();
  // Every render quantum of the received track (128 samples, ~2.7 ms) reports its sum of squares and the context time it
  // was rendered for. The audio thread stamps it, so a busy page (JPEG encoding of frames) delays the message, not the
  // time: the polled analyser this replaces read "the newest samples" at whenever a late timer fired.
  const worklet = `registerProcessor('heard-rms', class extends AudioWorkletProcessor {
    process(inputs) {
      const channel = inputs[0] && inputs[0][0];
      if (channel) {
        let sum = 0;
        for (let i = 0; i < channel.length; i++) sum += channel[i] * channel[i];
        this.port.postMessage({ time: currentTime, samples: channel.length, sum });
      }
      return true;
    }
  });`;
  await audioCtx.audioWorklet.addModule(URL.createObjectURL(new Blob([worklet], { type: 'text/javascript' })));
  // Context time → the performance time a listener hears it: the device's own pairing of the two (its output latency
  // included), refreshed as it drifts; before the device reports one, now + the latency the context states.
  const heardAt = (contextTime) => {
    const stamp = audioCtx.getOutputTimestamp();
    if (stamp && stamp.performanceTime > 0) return stamp.performanceTime + (contextTime - stamp.contextTime) * 1000;
    const latencyS = (audioCtx.outputLatency || 0) + (audioCtx.baseLatency || 0);
    return performance.now() + (contextTime - audioCtx.currentTime + latencyS) * 1000;
  };
  const tapAudio = (track) => {
    const source = audioCtx.createMediaStreamSource(new MediaStream([track]));
    const tap = new AudioWorkletNode(audioCtx, 'heard-rms');
    const silent = audioCtx.createGain();
    silent.gain.value = 0;
    source.connect(tap).connect(silent).connect(audioCtx.destination);
    tap.port.onmessage = ({ data }) => {
      if (!bench.recording) return;
      const middle = data.time + data.samples / 2 / audioCtx.sampleRate;
      bench.audio.push({ at: heardAt(middle), rms: Math.sqrt(data.sum / data.samples) });
      // How far ahead of now the context's present moment is heard: the output latency the device stamps imply.
      if (bench.audio.length % 100 === 0) bench.latencies.push(heardAt(audioCtx.currentTime) - performance.now());
    };
  };
  const waitForAudio = () => {
    const receiver = element.client.peer.getReceivers().find((r) => r.track && r.track.kind === 'audio');
    if (receiver) tapAudio(receiver.track);
    else setTimeout(waitForAudio, 50);
  };
  waitForAudio();
  // While recording, a presented frame is only copied into a canvas of its own (a blit); the JPEGs are made after the
  // turn (`bench.encode`). Encoding each one as it came kept the page's main thread busy enough on 2 loaded cores to
  // miss frames, and a missed frame holds its predecessor's mouth on the grid: lag and noise the service did not make.
  const copies = [];
  let lastPresented = null;
  bench.missed = 0;
  const onFrame = (now, metadata) => {
    if (bench.recording && video.videoWidth > 0) {
      const canvas = document.createElement('canvas');
      canvas.width = video.videoWidth;
      canvas.height = video.videoHeight;
      canvas.getContext('2d').drawImage(video, 0, 0);
      copies.push({
        at: metadata && metadata.expectedDisplayTime ? metadata.expectedDisplayTime : now,
        // When the frame's last packet arrived: from there to its display is what the receiver held it.
        receivedAt: metadata && metadata.receiveTime ? metadata.receiveTime : null,
        canvas,
      });
      // Frames the compositor presented without this callback seeing them (the page was busy).
      if (metadata && lastPresented !== null) bench.missed += Math.max(0, metadata.presentedFrames - lastPresented - 1);
    }
    lastPresented = metadata ? metadata.presentedFrames : null;
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
  bench.encode = () => {
    bench.frames = copies.splice(0).map(({ at, receivedAt, canvas }) => ({
      at,
      receivedAt,
      jpeg: canvas.toDataURL('image/jpeg', 0.92),
    }));
  };
  // The received streams' counters (`inbound-rtp`): their jitter buffers and the minimum delays Chromium's own A/V
  // sync puts on each (`jitterBufferMinimumDelay`).
  bench.inbound = async () => {
    const out = {};
    (await element.client.peer.getStats()).forEach((s) => {
      if (s.type === 'inbound-rtp') out[s.kind] = s;
    });
    return out;
  };
}
