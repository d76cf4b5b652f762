// The typed client of the avatar service: sessions, WebRTC media, SSE events, conversation verbs, microphone and
// client tools, over the public HTTP API only (docs/embedding.md). No framework and no Node built-ins: it runs in a
// browser as is, and in Node when given a WebRTC implementation (`RTCPeerConnection` of @roamhq/wrtc).
import type {
  ChatRequest,
  CreateSessionRequest,
  CreateSessionResponse,
  InterruptResponse,
  SdpAnswer,
  ServerEvents,
  ServerEventType,
  SessionInfo,
  SessionTranscript,
  SpeakRequest,
  ToolResultResponse,
} from './generated/api-types.ts';
import { PoseStream } from './pose-stream.ts';
import { channelAudioContext } from './channel-audio.ts';

export type * from './generated/api-types.ts';
export { PoseStream, type PoseStreamFigures } from './pose-stream.ts';
export {
  ChannelAudioPlayer,
  channelAudioContext,
  channelAudioSupported,
  type ChannelAudioFigures,
} from './channel-audio.ts';

/** The label of the data channel a client-rendered session's poses arrive on (the service's `POSE_CHANNEL_LABEL`). */
export const POSE_CHANNEL_LABEL = 'avatar';
/** Non-trickle ICE: how long the client gathers candidates before it sends its offer (the service does the same). */
export const ICE_GATHER_MS = 2_000;
/** First wait before an SSE stream that ended is opened again; doubled after each failed attempt. */
export const SSE_RETRY_FIRST_MS = 500;
/** Longest wait between SSE reconnect attempts: a restarting proxy is back well within it. */
export const SSE_RETRY_MAX_MS = 8_000;
/** A line of the SSE stream longer than this ends the stream (the service's own events are a few hundred bytes). */
export const SSE_MAX_LINE_CHARS = 1024 * 1024;

/** A refusal of the service: the HTTP status and the `{detail}` it answered with. */
/** How much wider than the face a face-centred crop is: head, hair and a little shoulder, as in a video call. */
export const FACE_CROP_WIDTHS = 2.4;

/**
 * Where to show a photo avatar's video so that its face fills the view: the square crop around the face box of
 * `metadata.animation` (GET /avatars/{id}), as CSS percentages for a video element inside a square box with
 * `overflow: hidden` (`width`/`height` of the element, `left`/`top` its offset). Null when the manifest has no face
 * box (drawn and clip avatars are framed on the face already) or the crop would be the whole frame.
 */
export function faceCrop(manifest: {
  width: number;
  height: number;
  metadata?: Record<string, unknown>;
}): { left: string; top: string; width: string; height: string } | null {
  const box = (
    manifest.metadata?.animation as { face_box?: { x: number; y: number; width: number; height: number } } | undefined
  )?.face_box;
  if (!box || !(box.width > 0) || !(box.height > 0)) return null;
  const side = Math.min(manifest.width, manifest.height, Math.max(box.width, box.height) * FACE_CROP_WIDTHS);
  if (side >= Math.min(manifest.width, manifest.height)) return null;
  // Centred on the face, a little above its middle (more hair than neck), kept inside the frame.
  const x = Math.min(Math.max(box.x + box.width / 2 - side / 2, 0), manifest.width - side);
  const y = Math.min(Math.max(box.y + box.height * 0.45 - side / 2, 0), manifest.height - side);
  const pct = (value: number) => `${((value / side) * 100).toFixed(3)}%`;
  return { left: pct(-x), top: pct(-y), width: pct(manifest.width), height: pct(manifest.height) };
}

export class AvatarApiError extends Error {
  override readonly name = 'AvatarApiError';
  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number,
    readonly detail: string,
  ) {
    super(`${method} ${path} answered ${status}: ${detail}`);
  }
}

/** The service could not be reached, or (in a browser) refused to let this page's origin read it (CORS). */
export class AvatarNetworkError extends Error {
  override readonly name = 'AvatarNetworkError';
  constructor(
    readonly method: string,
    readonly path: string,
    override readonly cause: unknown,
  ) {
    super(`${method} ${path} did not reach the service: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

/** Answers a client tool's call (SSE `tool_call`): its return value (any JSON) is what the model receives. */
export type ToolHandler = (args: Record<string, unknown>, call: ServerEvents['tool_call']) => unknown;

type PeerConnectionClass = new (config?: RTCConfiguration) => RTCPeerConnection;

export interface AvatarClientOptions {
  /** The service's base URL (`https://avatar.example.com`); empty for the page's own origin. */
  server?: string;
  /** Client tools: one handler per tool name; each `tool_call` of such a tool is answered on `tool_results`. */
  tools?: Record<string, ToolHandler>;
  /** WebRTC implementation; the browser's by default (in Node: `(await import('@roamhq/wrtc')).default.RTCPeerConnection`). */
  RTCPeerConnection?: PeerConnectionClass;
  /** The microphone for `talk()`; the browser's `getUserMedia` by default. */
  getUserMedia?: (constraints: MediaStreamConstraints) => Promise<MediaStream>;
  fetch?: typeof fetch;
  /**
   * Where the face is drawn (docs/embedding.md): `server` (default) sends it as video; `client` has this browser draw
   * it into `canvas` from the avatar's render kit and the session's pose stream, and the peer receives audio only.
   * `createSession` asks for it unless its request says otherwise.
   */
  render?: 'server' | 'client';
  /** The canvas a client-rendered face is drawn into; one is created when absent (`AvatarClient.canvas`). */
  canvas?: HTMLCanvasElement;
}

/** Events of the client itself, besides the service's SSE events. */
export interface ClientEvents {
  /** A remote track arrived (audio or video of the avatar). */
  track: { track: MediaStreamTrack; stream: MediaStream | null };
  /** The SSE stream was lost and is being reopened. */
  reconnecting: { attempt: number; delayMs: number };
  /** A client tool's handler threw; the model got `{error}` as its output. */
  tool_error: { call: ServerEvents['tool_call']; error: unknown };
  /** A client-rendered face could not be loaded or drawn (the audio goes on). */
  render_error: { error: unknown };
}
type AnyEvents = ServerEvents & ClientEvents;

/** What one request answered: the parsed body and the turn id header (speak, chat). */
interface Answer<T> {
  data: T;
  turnId: string | null;
}

export class AvatarClient {
  /** The session this client drives; set by `createSession` or `attach`. */
  sessionId: string | null = null;
  /** The current WebRTC peer (replaced by `talk()`, which offers again with the microphone). */
  peer: RTCPeerConnection | null = null;
  /** The microphone while talking. */
  microphone: MediaStream | null = null;
  /** A client-rendered session's canvas (`render: 'client'`): put it on the page; null when rendered on the server. */
  canvas: HTMLCanvasElement | null = null;
  /** A client-rendered session's pose stream on the current peer (its figures show what was drawn when). */
  poseStream: PoseStream | null = null;
  /**
   * Where a client-rendered session's audio plays when it comes on the pose channel (docs/embedding.md, "Channel
   * audio"): made or resumed by `useRendering('client')`, which a page calls in the click that starts the session
   * (browsers let audio start only from a user gesture). Null when rendered on the server or without Web Audio.
   */
  audioContext: AudioContext | null = null;

  private readonly server: string;
  private readonly fetchImpl: typeof fetch;
  private readonly listeners = new Map<string, Set<(data: unknown) => void>>();
  private readonly tools: Record<string, ToolHandler>;
  private events: AbortController | null = null;

  constructor(private readonly options: AvatarClientOptions = {}) {
    this.server = (options.server ?? '').replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.tools = { ...options.tools };
    this.on('tool_call', (call) => void this.answerToolCall(call));
    this.useRendering(options.render ?? 'server', options.canvas);
  }

  /**
   * Where the next session's face is drawn (`AvatarClientOptions.render`): takes effect at the next `createSession` and
   * offer. `client` draws into `canvas`, or one this client creates (`canvas` then holds it).
   */
  useRendering(render: 'server' | 'client', canvas?: HTMLCanvasElement): void {
    this.options.render = render;
    if (render === 'server') this.canvas = null;
    else {
      this.canvas =
        canvas ?? this.canvas ?? (typeof document === 'undefined' ? null : document.createElement('canvas'));
      // In the user gesture (when called from one): the context may start playing.
      this.audioContext = channelAudioContext(this.audioContext);
    }
  }

  /** What the page hears of a client-rendered session's channel audio (an AudioNode to tap); null on the track. */
  get channelAudioOutput(): AudioNode | null {
    return this.poseStream?.figures.audioRoute === 'channel' ? (this.poseStream.audio?.output ?? null) : null;
  }

  /** Listens to an SSE event of the session (or a client event); returns the function that stops listening. */
  on<K extends keyof AnyEvents>(type: K, listener: (data: AnyEvents[K]) => void): () => void {
    let set = this.listeners.get(type);
    if (!set) this.listeners.set(type, (set = new Set()));
    set.add(listener as (data: unknown) => void);
    return () => set.delete(listener as (data: unknown) => void);
  }

  /** Adds or replaces a client tool's handler. */
  handleTool(name: string, handler: ToolHandler): void {
    this.tools[name] = handler;
  }

  // ——— sessions ———

  async createSession(request: CreateSessionRequest): Promise<string> {
    const body =
      this.options.render && request.render === undefined ? { ...request, render: this.options.render } : request;
    const { data } = await this.request<CreateSessionResponse>('POST', '/sessions', body);
    this.sessionId = data.session_id;
    return data.session_id;
  }

  /** Drives an existing session instead of creating one. */
  attach(sessionId: string): void {
    this.sessionId = sessionId;
  }

  async start(): Promise<void> {
    await this.request('POST', this.sessionPath('/start'));
  }

  async session(): Promise<SessionInfo> {
    return (await this.request<SessionInfo>('GET', this.sessionPath(''))).data;
  }

  async transcript(): Promise<SessionTranscript> {
    return (await this.request<SessionTranscript>('GET', this.sessionPath('/transcript'))).data;
  }

  /**
   * Ends the session (DELETE) and closes the media, the microphone and the event stream. Idempotent. `keepalive`
   * lets the request outlive a closing page (`pagehide`).
   */
  async end({ keepalive = false } = {}): Promise<void> {
    const sessionId = this.sessionId;
    this.disconnect();
    this.sessionId = null;
    void this.audioContext?.close().catch(() => undefined);
    this.audioContext = null;
    if (sessionId !== null)
      await this.request('DELETE', `/sessions/${encodeURIComponent(sessionId)}`, undefined, { keepalive });
  }

  /** Closes media and events without ending the session. Idempotent. */
  disconnect(): void {
    this.events?.abort();
    this.events = null;
    this.stopTalking();
    this.poseStream?.close();
    this.poseStream = null;
    this.peer?.close();
    this.peer = null;
  }

  // ——— media and events ———

  /**
   * Opens the event stream (reopened when it drops, until the session ends) and a WebRTC peer receiving the avatar's
   * video and audio; `onTrack` (or the `track` event) hands over each remote track.
   */
  async connect(): Promise<RTCPeerConnection> {
    this.openEvents();
    return this.offer(null);
  }

  /**
   * Hands-free conversation: the microphone (echo-cancelled, so the avatar's own voice does not interrupt it) goes to
   * the service on the WebRTC audio track, which takes a new offer. Talking over the avatar interrupts it.
   */
  async talk(): Promise<MediaStream> {
    if (this.microphone) return this.microphone;
    const getUserMedia =
      this.options.getUserMedia ?? ((c: MediaStreamConstraints) => navigator.mediaDevices.getUserMedia(c));
    const microphone = await getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    this.microphone = microphone;
    try {
      await this.offer(microphone);
    } catch (error) {
      this.stopTalking();
      throw error;
    }
    return microphone;
  }

  /** Stops the microphone (the peer keeps receiving; the service hears silence). */
  stopTalking(): void {
    for (const track of this.microphone?.getTracks() ?? []) track.stop();
    this.microphone = null;
  }

  // ——— conversation ———

  /** Says the text as written; answers the turn id its SSE events carry. */
  async speak(text: string, overrides: Omit<SpeakRequest, 'text'> = {}): Promise<string | null> {
    return (await this.request('POST', this.sessionPath('/speak'), { text, ...overrides })).turnId;
  }

  /** Sends the prompt to the language model; the reply is spoken. Answers the turn id. */
  async chat(prompt: string, overrides: Omit<ChatRequest, 'prompt'> = {}): Promise<string | null> {
    return (await this.request('POST', this.sessionPath('/chat'), { prompt, ...overrides })).turnId;
  }

  /** Barge-in: the current turn stops, the avatar goes idle. */
  async interrupt(): Promise<InterruptResponse> {
    return (await this.request<InterruptResponse>('POST', this.sessionPath('/interrupt'))).data;
  }

  async pause(): Promise<void> {
    await this.request('POST', this.sessionPath('/pause'));
  }

  async resume(): Promise<void> {
    await this.request('POST', this.sessionPath('/resume'));
  }

  /** Answers a client tool's call by hand (handlers registered in `tools` do this automatically). */
  async sendToolResult(callId: string, output: unknown): Promise<ToolResultResponse> {
    return (
      await this.request<ToolResultResponse>('POST', this.sessionPath('/tool_results'), { call_id: callId, output })
    ).data;
  }

  // ——— internals ———

  private sessionPath(suffix: string): string {
    if (this.sessionId === null) throw new Error('no session: call createSession() or attach() first');
    return `/sessions/${encodeURIComponent(this.sessionId)}${suffix}`;
  }

  private emit<K extends keyof AnyEvents>(type: K, data: AnyEvents[K]): void {
    for (const listener of this.listeners.get(type) ?? []) {
      try {
        listener(data);
      } catch (error) {
        // A listener's bug must not stop the others, nor the stream.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  /** One JSON request; a non-2xx answer becomes an AvatarApiError with the service's `detail`. */
  async request<T = unknown>(method: string, path: string, body?: unknown, init: RequestInit = {}): Promise<Answer<T>> {
    let response: Response;
    try {
      response = await this.fetchImpl(`${this.server}${path}`, {
        ...init,
        method,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      throw new AvatarNetworkError(method, path, error);
    }
    const text = await response.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = text;
    }
    if (!response.ok) {
      const detail =
        typeof (data as { detail?: unknown } | null)?.detail === 'string'
          ? (data as { detail: string }).detail
          : text || response.statusText;
      throw new AvatarApiError(method, path, response.status, detail);
    }
    return { data: data as T, turnId: response.headers.get('x-turn-id') };
  }

  /** A new peer (with the microphone when given) replaces the previous one once the service answered it. */
  private async offer(microphone: MediaStream | null): Promise<RTCPeerConnection> {
    const path = this.sessionPath('/webrtc/offer');
    const PeerConnection = this.options.RTCPeerConnection ?? globalThis.RTCPeerConnection;
    if (!PeerConnection) throw new Error('no WebRTC implementation: pass RTCPeerConnection in the options');
    const pc = new PeerConnection();
    const clientRendered = this.options.render === 'client';
    let poses: RTCDataChannel | null = null;
    let audio: RTCRtpTransceiver;
    try {
      // A client-rendered face comes as poses on the `avatar` data channel, drawn here: no video is asked for.
      if (clientRendered) poses = pc.createDataChannel(POSE_CHANNEL_LABEL);
      else pc.addTransceiver('video', { direction: 'recvonly' });
      const track = microphone?.getAudioTracks()[0];
      if (track) audio = pc.addTransceiver(track, { direction: 'sendrecv', streams: [microphone!] });
      else audio = pc.addTransceiver('audio', { direction: 'recvonly' });
      pc.addEventListener('track', (event) =>
        this.emit('track', { track: event.track, stream: event.streams[0] ?? null }),
      );
      await pc.setLocalDescription(await pc.createOffer());
      await gatherIce(pc);
      const { data: answer } = await this.request<SdpAnswer>('POST', path, {
        type: 'offer',
        sdp: pc.localDescription!.sdp,
      });
      await pc.setRemoteDescription(answer);
    } catch (error) {
      pc.close();
      throw error;
    }
    const previous = this.peer;
    this.peer = pc;
    previous?.close();
    this.poseStream?.close();
    // Channel audio: once the service routes the audio to the channel, the track's (silent) audio is muted, so a
    // page's media element never plays it alongside the player.
    const receiver = audio.receiver;
    const channelAudio = this.audioContext
      ? {
          context: this.audioContext,
          onRoute: (route: 'track' | 'channel') => {
            receiver.track.enabled = route === 'track';
            if (route === 'channel') void this.audioContext?.resume().catch(() => undefined);
          },
        }
      : null;
    this.poseStream = poses
      ? new PoseStream(
          poses,
          receiver,
          this.canvas,
          this.server,
          (error) => this.emit('render_error', { error }),
          channelAudio,
        )
      : null;
    return pc;
  }

  /** The SSE stream, reopened after a drop (the service keeps no event ids: events sent meanwhile are missed). */
  private openEvents(): void {
    if (this.events) return;
    const controller = new AbortController();
    this.events = controller;
    const path = this.sessionPath('/events');
    void (async () => {
      let delay = SSE_RETRY_FIRST_MS;
      for (let attempt = 1; !controller.signal.aborted; attempt++) {
        let terminated = false;
        try {
          const response = await this.fetchImpl(`${this.server}${path}`, {
            headers: { accept: 'text/event-stream' },
            signal: controller.signal,
          });
          if (response.status === 404 || response.status === 409) {
            // Gone or over: nothing to reconnect to.
            this.emit('session.terminated', {});
            break;
          }
          if (response.ok && response.body) {
            delay = SSE_RETRY_FIRST_MS;
            attempt = 0;
            terminated = await this.readEvents(response.body, controller.signal);
          }
        } catch {
          // Dropped or refused: tried again below unless closed.
        }
        if (terminated || controller.signal.aborted) break;
        this.emit('reconnecting', { attempt: attempt + 1, delayMs: delay });
        await sleep(delay, controller.signal);
        delay = Math.min(delay * 2, SSE_RETRY_MAX_MS);
      }
      if (this.events === controller) this.events = null;
    })();
  }

  /** Reads one stream to its end; true when it ended with `session.terminated`. */
  private async readEvents(body: ReadableStream<Uint8Array>, signal: AbortSignal): Promise<boolean> {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    signal.addEventListener('abort', () => void reader.cancel().catch(() => undefined), { once: true });
    let buffer = '';
    let type = 'message';
    let data: string[] = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r?\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(buffer[newline] === '\r' ? newline + 2 : newline + 1);
        if (line === '') {
          if (data.length > 0) {
            const payload = parseJson(data.join('\n'));
            this.emit(type as ServerEventType, payload as never);
            if (type === 'session.terminated') return true;
          }
          type = 'message';
          data = [];
        } else if (line.startsWith('event:')) type = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (buffer.length > SSE_MAX_LINE_CHARS) throw new Error('SSE line too long');
    }
  }

  private async answerToolCall(call: ServerEvents['tool_call']): Promise<void> {
    const handler = this.tools[call.name];
    if (!handler) return;
    let output: unknown;
    try {
      output = await handler(call.arguments, call);
    } catch (error) {
      this.emit('tool_error', { call, error });
      output = { error: error instanceof Error ? error.message : String(error) };
    }
    await this.sendToolResult(call.call_id, output ?? null).catch((error) => this.emit('tool_error', { call, error }));
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function gatherIce(pc: RTCPeerConnection): Promise<void> {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ICE_GATHER_MS);
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState !== 'complete') return;
      clearTimeout(timer);
      resolve();
    });
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/** Live captions over the avatar (the page at / and `<avatar-chat>` use it). */
export { showLiveCaptions } from './live-captions.ts';
