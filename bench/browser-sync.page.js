// Runs in the page: WebRTC receive, audio onset detection, timecode reading of presented frames.
// Plain JavaScript on purpose: the bench's TypeScript loader would inject helpers the page lacks.
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- read as source text and sent to the page
async function pageScript({ base, sessionId }) {
  const bench = { frames: [], onsets: [] };
  window.bench = bench;
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const stream = new MediaStream();
  const video = document.createElement('video');
  video.muted = true;
  video.autoplay = true;
  document.body.appendChild(video);
  const canvas = document.createElement('canvas');
  const ctx2d = canvas.getContext('2d', { willReadFrequently: true });
  const audioCtx = new AudioContext();
  let speaking = false;
  pc.ontrack = (ev) => {
    stream.addTrack(ev.track);
    video.srcObject = stream;
    if (ev.track.kind === 'audio') {
      const source = audioCtx.createMediaStreamSource(new MediaStream([ev.track]));
      const analyser = audioCtx.createAnalyser();
      analyser.fftSize = 256;
      source.connect(analyser);
      const buf = new Float32Array(analyser.fftSize);
      setInterval(() => {
        analyser.getFloatTimeDomainData(buf);
        let sum = 0;
        for (const v of buf) sum += v * v;
        const rms = Math.sqrt(sum / buf.length);
        if (!speaking && rms > 0.01) {
          speaking = true;
          // The analyser's newest samples are what the graph renders "now"; the listener hears them after the
          // context's output latency (device buffer), so that is added to get the audible onset.
          const latencyS = (audioCtx.outputLatency || 0) + (audioCtx.baseLatency || 0);
          bench.audioLatencyMs = latencyS * 1000;
          bench.onsets.push(performance.now() + latencyS * 1000);
        }
        if (speaking && rms < 0.002) speaking = false;
      }, 2);
    }
  };
  const onFrame = (now, metadata) => {
    const w = video.videoWidth;
    const h = video.videoHeight;
    if (w && h) {
      canvas.width = w;
      canvas.height = h;
      ctx2d.drawImage(video, 0, 0);
      // Timecode layout of actors/render/timecode.ts: 3 rows of 32 blocks, sync word 0xa5c3, then the frame index.
      const bw = Math.max(1, Math.floor(w / 32));
      const bh = Math.max(8, bw >> 1);
      const px = ctx2d.getImageData(0, 0, w, bh * 3).data;
      const bit = (i) => {
        const x = (i % 32) * bw + (bw >> 1);
        const y = Math.floor(i / 32) * bh + (bh >> 1);
        const o = (y * w + x) * 4;
        return 0.299 * px[o] + 0.587 * px[o + 1] + 0.114 * px[o + 2] > 125 ? 1 : 0;
      };
      let sync = 0;
      for (let i = 0; i < 16; i++) sync = sync * 2 + bit(i);
      if (sync === 0xa5c3) {
        let idx = 0;
        for (let i = 16; i < 48; i++) idx = idx * 2 + bit(i);
        // expectedDisplayTime: when the compositor shows this frame (the callback itself runs up to a vsync earlier).
        bench.frames.push({ idx, at: metadata && metadata.expectedDisplayTime ? metadata.expectedDisplayTime : now });
      }
    }
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((resolve) => {
    if (pc.iceGatheringState === 'complete') return resolve();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && resolve();
    setTimeout(resolve, 2000);
  });
  const res = await fetch(`${base}/sessions/${sessionId}/webrtc/offer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ sdp: pc.localDescription.sdp, type: 'offer' }),
  });
  await pc.setRemoteDescription(await res.json());
}
