// Runs in the page: an <avatar-chat> from the service's /widget.js, the heard audio's RMS envelope and every presented
// video frame (as a JPEG, with the time the compositor shows it). Plain JavaScript on purpose, like browser-sync.page.js.
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- read as source text and sent to the page
async function mouthSyncPage({ avatar }) {
  const bench = { audio: [], frames: [], recording: false, sessionId: null, error: null };
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
  const tapAudio = (track) => {
    const source = audioCtx.createMediaStreamSource(new MediaStream([track]));
    const analyser = audioCtx.createAnalyser();
    analyser.fftSize = 512;
    source.connect(analyser);
    const buf = new Float32Array(analyser.fftSize);
    setInterval(() => {
      if (!bench.recording) return;
      analyser.getFloatTimeDomainData(buf);
      let sum = 0;
      for (const v of buf) sum += v * v;
      // The analyser holds the newest fftSize samples the graph rendered; a listener hears them after the context's
      // output latency, so the window's middle is heard at now + latency − half the window.
      const latencyMs = ((audioCtx.outputLatency || 0) + (audioCtx.baseLatency || 0)) * 1000;
      const halfWindowMs = (analyser.fftSize / 2 / audioCtx.sampleRate) * 1000;
      bench.audio.push({ at: performance.now() + latencyMs - halfWindowMs, rms: Math.sqrt(sum / buf.length) });
    }, 5);
  };
  const waitForAudio = () => {
    const receiver = element.client.peer.getReceivers().find((r) => r.track && r.track.kind === 'audio');
    if (receiver) tapAudio(receiver.track);
    else setTimeout(waitForAudio, 50);
  };
  waitForAudio();
  const canvas = document.createElement('canvas');
  const context = canvas.getContext('2d');
  const onFrame = (now, metadata) => {
    if (bench.recording && video.videoWidth > 0) {
      canvas.width = video.videoWidth;
      canvas.height = video.videoHeight;
      context.drawImage(video, 0, 0);
      bench.frames.push({
        at: metadata && metadata.expectedDisplayTime ? metadata.expectedDisplayTime : now,
        jpeg: canvas.toDataURL('image/jpeg', 0.92),
      });
    }
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
}
