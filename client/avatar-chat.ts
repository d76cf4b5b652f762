// `<avatar-chat>`: the avatar on any page with two lines (docs/embedding.md). A custom element in a shadow root, built
// on AvatarClient; served bundled at /widget.js (src/ui/client-bundles.ts). Attributes: server, avatar, model, voice,
// system-prompt, mode (text | voice | both), theme (light | dark | auto), reply (chat | speak; by default chat when the
// service has a language model). Events for the host page: ready, speaking, transcript, tool-call, error.
import { AvatarApiError, AvatarClient, AvatarNetworkError, faceCrop, type ToolHandler } from './avatar-client.ts';
import { showLiveCaptions } from './live-captions.ts';

/** Transcript lines kept in the element: a long conversation must not grow the page without bound. */
export const TRANSCRIPT_LINES_KEPT = 100;

/** What the service can do, from GET /health: chat needs a language model, Talk needs speech recognition. */
interface Capabilities {
  llm: boolean;
  asr: boolean;
}

/** The origin this script was loaded from: the default `server`, so the two-line snippet needs no attribute. */
const scriptOrigin = (() => {
  const src = (document.currentScript as HTMLScriptElement | null)?.src;
  return src ? new URL(src).origin : location.origin;
})();

const STYLE = `
:host { display: block; max-width: 420px; font-family: system-ui, sans-serif; --accent: #3b7ddd; --bg: #fff; --fg: #1b2a41; --line: #8886; color: var(--fg); }
:host([theme="dark"]) { --bg: #15191f; --fg: #eef; }
@media (prefers-color-scheme: dark) { :host([theme="auto"]) { --bg: #15191f; --fg: #eef; } }
.box { background: var(--bg); border: 1px solid var(--line); border-radius: 12px; padding: 10px; display: flex; flex-direction: column; gap: 8px; }
.stage { position: relative; width: 100%; aspect-ratio: 1; overflow: hidden; border-radius: 8px; background: #111; }
video, canvas { position: absolute; left: 0; top: 0; width: 100%; height: 100%; object-fit: contain; display: block; }
.badge { position: absolute; top: 8px; left: 8px; padding: 2px 10px; border-radius: 12px; background: #000a; color: #fff; font-size: .8rem; }
.badge[data-stage="speaking"] { background: #2e86c1d0; } .badge[data-stage="listening"] { background: #1e8449d0; } .badge[data-stage="thinking"] { background: #b9770ed0; }
.badge[data-stage="refused"], .badge[data-stage="unreachable"], .badge[data-stage="error"] { background: #c0392bd0; }
ol { list-style: none; margin: 0; padding: 0; max-height: 160px; overflow: auto; font-size: .9rem; }
li { padding: 2px 0; overflow-wrap: anywhere; } li[data-role="user"] { opacity: .8; }
.who { font-weight: 600; margin-right: .4em; }
.note { font-size: .85rem; margin: 0; opacity: .85; }
form, .row { display: flex; gap: 6px; flex-wrap: wrap; }
input { flex: 1 1 160px; min-width: 0; font: inherit; padding: 6px; border-radius: 6px; border: 1px solid var(--line); background: transparent; color: inherit; }
button { font: inherit; min-height: 36px; padding: 6px 12px; border-radius: 6px; border: 1px solid var(--line); background: transparent; color: inherit; cursor: pointer; }
button[aria-pressed="true"], button.primary:enabled { background: var(--accent); color: #fff; border-color: var(--accent); }
button:disabled, input:disabled { opacity: .45; cursor: not-allowed; }
button:focus-visible, input:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.error { color: #fff; background: #c0392b; border-radius: 6px; padding: 6px 8px; margin: 0; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
[hidden] { display: none !important; }
@media (max-width: 480px) { :host { max-width: none; } .box { border-radius: 0; border: 0; padding: 6px; }
  .row { display: grid; grid-template-columns: 1fr 1fr; } form { flex-wrap: nowrap; } input { flex: 1 1 auto; min-height: 44px; } button { min-height: 44px; } }
`;

const TEMPLATE = `
<div class="box" part="box">
  <div class="stage"><video playsinline autoplay aria-label="Avatar"></video><span class="badge" aria-hidden="true">offline</span></div>
  <p class="error" role="alert" hidden></p>
  <p class="note" data-note hidden></p>
  <div class="row"><button type="button" class="primary" data-action="start">Start conversation</button>
    <button type="button" data-action="stop" disabled>Stop</button>
    <button type="button" data-action="talk" aria-pressed="false" disabled>Talk</button>
    <button type="button" data-action="end" disabled>End</button></div>
  <form><label class="sr" for="message">Message</label><input id="message" autocomplete="off" placeholder="Type a message" disabled>
    <button type="submit" disabled>Send</button></form>
  <ol aria-live="polite" aria-label="Transcript"></ol>
  <p class="sr" aria-live="polite" data-status></p>
</div>`;

export class AvatarChatElement extends HTMLElement {
  static observedAttributes = ['mode', 'theme'];
  /** The client driving this element's session (null before Start). */
  client: AvatarClient | null = null;
  /** Client tools: one handler per tool name (the session's `tools` must declare them, see `tool-definitions`). */
  tools: Record<string, ToolHandler> = {};
  private readonly root: ShadowRoot;
  private readonly captions = new Map<string, HTMLSpanElement>();
  private server = scriptOrigin;
  /** GET /health's answer for `server`, asked once when the element joins the page (again at Start if that failed). */
  private capabilities: Promise<Capabilities | null> | null = null;
  /** `reply` as used: the attribute, or chat with a language model and speak without. */
  private replyMode: 'chat' | 'speak' = 'chat';
  /** Removes the live caption line of the previous session. */
  private stopCaptions: (() => void) | null = null;

  constructor() {
    super();
    this.root = this.attachShadow({ mode: 'open' });
    this.root.innerHTML = `<style>${STYLE}</style>${TEMPLATE}`;
    this.button('start').onclick = () => void this.start();
    this.button('stop').onclick = () => void this.client?.interrupt().catch((e) => this.fail(e));
    this.button('end').onclick = () => void this.end();
    this.button('talk').onclick = () => void this.toggleTalk();
    this.root.querySelector('form')!.onsubmit = (event) => {
      event.preventDefault();
      void this.send();
    };
  }

  connectedCallback(): void {
    this.applyMode();
    if (!this.hasAttribute('theme')) this.setAttribute('theme', 'auto');
    window.addEventListener('pagehide', this.onPageHide);
    this.server = this.getAttribute('server') ?? scriptOrigin;
    this.capabilities ??= this.loadCapabilities();
    const avatarId = this.getAttribute('avatar');
    if (avatarId) void this.showAvatar(avatarId);
  }

  /** What the service offers; null when it cannot be asked (unreachable or refusing this origin: Start says which). */
  private async loadCapabilities(): Promise<Capabilities | null> {
    try {
      const response = await fetch(`${this.server}/health`);
      if (!response.ok) return null;
      const { components } = (await response.json()) as { components: Record<string, { status: string } | undefined> };
      return { llm: components.llm?.status === 'ok', asr: components.asr?.status === 'ok' };
    } catch {
      return null;
    }
  }

  /** Before a session, the avatar's preview; before and during, photo avatars cropped to their face. */
  private async showAvatar(avatarId: string): Promise<{ model_type: string } | null> {
    const video = this.root.querySelector('video')!;
    if (!video.srcObject) video.poster = `${this.server}/avatars/${encodeURIComponent(avatarId)}/preview`;
    try {
      const response = await fetch(`${this.server}/avatars/${encodeURIComponent(avatarId)}`);
      if (!response.ok) return null;
      const manifest = (await response.json()) as {
        model_type: string;
        width: number;
        height: number;
        metadata?: Record<string, unknown>;
      };
      Object.assign(video.style, faceCrop(manifest) ?? { left: '0', top: '0', width: '100%', height: '100%' });
      return manifest;
    } catch {
      return null;
    }
  }

  /** Chat or speak, Talk or not, from what the service has; says once in the element what is missing. */
  private applyCapabilities(capabilities: Capabilities | null): void {
    const attribute = this.getAttribute('reply');
    this.replyMode =
      attribute === 'speak' || attribute === 'chat' ? attribute : capabilities && !capabilities.llm ? 'speak' : 'chat';
    const notes: string[] = [];
    if (!attribute && this.replyMode === 'speak')
      notes.push('This service has no language model: the avatar says what you type.');
    const talkOff = capabilities !== null && !capabilities.asr && this.getAttribute('mode') !== 'text';
    this.talkReason = talkOff ? 'Talk is off: this service has no speech recognition.' : null;
    if (this.talkReason) notes.push(this.talkReason);
    const note = this.root.querySelector<HTMLElement>('[data-note]')!;
    note.textContent = notes.join(' ');
    note.hidden = notes.length === 0;
    const talk = this.button('talk');
    if (this.talkReason) talk.title = this.talkReason;
    else talk.removeAttribute('title');
  }

  /** Why Talk stays disabled in a live session (no speech recognition), or null. */
  private talkReason: string | null = null;

  disconnectedCallback(): void {
    window.removeEventListener('pagehide', this.onPageHide);
    void this.end({ keepalive: true });
  }

  attributeChangedCallback(): void {
    this.applyMode();
  }

  /** Creates, connects and starts a session with the element's attributes. */
  async start(): Promise<void> {
    if (this.client) return;
    this.showError(null);
    this.button('start').disabled = true;
    this.setStatus('connecting');
    const server = this.getAttribute('server') ?? scriptOrigin;
    // render="client": this browser draws the face from the render kit and the pose stream (docs/embedding.md). The
    // client is made here, in Start's click, before any wait: its audio (channel audio) may then start playing.
    const render = this.getAttribute('render') === 'client' ? 'client' : 'server';
    const client = new AvatarClient({ server, tools: this.tools, render });
    this.client = client;
    if (server !== this.server || !(await this.capabilities)) this.capabilities = this.loadCapabilities();
    this.server = server;
    this.listen(client);
    try {
      const avatarId =
        this.getAttribute('avatar') ?? (await client.request<Array<{ id: string }>>('GET', '/avatars')).data[0]?.id;
      if (!avatarId) throw new Error('the avatar service has no avatars');
      const [provider, voice] = (this.getAttribute('voice') ?? '').includes('|')
        ? this.getAttribute('voice')!.split('|')
        : [null, this.getAttribute('voice')];
      const manifest = await this.showAvatar(avatarId);
      this.applyCapabilities(await this.capabilities);
      const model =
        this.getAttribute('model') ??
        manifest?.model_type ??
        (await client.request<{ model_type: string }>('GET', `/avatars/${encodeURIComponent(avatarId)}`)).data
          .model_type;
      await client.createSession({
        avatar_id: avatarId,
        model,
        ...(provider ? { tts_provider: provider } : {}),
        ...(voice ? { tts_voice: voice } : {}),
        ...(this.getAttribute('system-prompt') ? { llm_system_prompt: this.getAttribute('system-prompt') } : {}),
      });
      await client.connect();
      await client.start();
      this.setLive(true);
      this.setStatus('idle');
      this.dispatch('ready', { sessionId: client.sessionId });
    } catch (error) {
      await this.fail(error);
      const stale = this.client;
      this.client = null;
      await stale?.end().catch(() => undefined);
      this.setLive(false);
    }
  }

  /** Ends the session (End, the element leaving the page, or the page closing). */
  async end({ keepalive = false } = {}): Promise<void> {
    const client = this.client;
    this.client = null;
    this.setLive(false);
    if (client) this.setStatus('ended');
    // The live picture goes; the avatar's preview (the poster) comes back.
    this.root.querySelector('video')!.srcObject = null;
    client?.canvas?.remove();
    await client?.end({ keepalive }).catch(() => undefined);
  }

  private readonly onPageHide = () => void this.end({ keepalive: true });

  private listen(client: AvatarClient): void {
    const video = this.root.querySelector('video')!;
    const stream = new MediaStream();
    this.stopCaptions?.();
    this.stopCaptions = showLiveCaptions(client, video.parentElement!);
    // A client-rendered face is drawn over the video element, which still plays the audio.
    if (client.canvas) {
      client.canvas.setAttribute('aria-label', 'Avatar');
      Object.assign(client.canvas.style, {
        left: video.style.left,
        top: video.style.top,
        width: video.style.width,
        height: video.style.height,
      });
      video.after(client.canvas);
    }
    client.on('track', ({ track }) => {
      for (const old of stream.getTracks().filter((t) => t.kind === track.kind)) stream.removeTrack(old);
      stream.addTrack(track);
      video.srcObject = stream;
      void video.play().catch(() => undefined);
    });
    client.on('status', ({ stage, turn_id }) => {
      this.setStatus(stage);
      if (stage === 'speaking') this.dispatch('speaking', { speaking: true, turnId: turn_id });
      if (stage === 'idle' || stage === 'interrupted') this.dispatch('speaking', { speaking: false, turnId: turn_id });
      if (stage === 'idle' && turn_id && this.captions.has(turn_id)) {
        this.dispatch('transcript', {
          role: 'assistant',
          text: this.captions.get(turn_id)!.textContent,
          turnId: turn_id,
        });
        this.captions.delete(turn_id);
      }
    });
    client.on('llm', ({ delta, turn_id }) => {
      if (turn_id) this.caption(turn_id).textContent += delta;
    });
    // A stream for this session only: End clears the element's video, the next session brings its own tracks.
    client.on('transcript', ({ text, is_final, turn_id }) => {
      if (!is_final) return;
      this.line('user', text);
      this.dispatch('transcript', { role: 'user', text, turnId: turn_id });
    });
    client.on('tool_call', (call) => this.dispatch('tool-call', call));
    client.on('error', ({ code, message }) => this.dispatch('error', { code, message }));
    client.on('session.terminated', () => {
      if (this.client === client) void this.end();
    });
  }

  private async send(): Promise<void> {
    const input = this.root.querySelector('input')!;
    const text = input.value.trim();
    if (!text || !this.client) return;
    input.value = '';
    try {
      if (this.replyMode === 'speak') {
        // The avatar says the text as typed: one line, the avatar's.
        const turnId = await this.client.speak(text);
        if (turnId) this.caption(turnId).textContent = text;
      } else {
        this.line('user', text);
        this.dispatch('transcript', { role: 'user', text, turnId: null });
        await this.client.chat(text);
      }
    } catch (error) {
      await this.fail(error);
    }
  }

  private async toggleTalk(): Promise<void> {
    const button = this.button('talk');
    if (!this.client) return;
    try {
      if (this.client.microphone) this.client.stopTalking();
      else await this.client.talk();
      button.setAttribute('aria-pressed', String(this.client.microphone !== null));
    } catch (error) {
      await this.fail(error);
    }
  }

  /** Shows what went wrong and what to do, and tells the host page (`error`). */
  private async fail(error: unknown): Promise<void> {
    const server = this.server;
    let message = error instanceof Error ? error.message : String(error);
    if (error instanceof AvatarNetworkError || (error instanceof AvatarApiError && error.status === 403)) {
      // A refused origin and an unreachable service look alike to fetch: an opaque request tells them apart.
      const reachable = await fetch(`${server}/healthz`, { mode: 'no-cors' }).then(
        () => true,
        () => false,
      );
      this.setStatus(reachable ? 'refused' : 'unreachable');
      message = reachable
        ? `This page (${location.origin}) is not allowed to use the avatar service at ${server}: add ${location.origin} to SERVICE_CORS_ORIGINS on the service.`
        : `The avatar service at ${server} cannot be reached: is it running?`;
    } else {
      this.setStatus('error');
      if (error instanceof AvatarApiError) message = error.detail;
    }
    this.showError(message);
    this.dispatch('error', { message, status: error instanceof AvatarApiError ? error.status : null });
  }

  private showError(message: string | null): void {
    const box = this.root.querySelector<HTMLElement>('.error')!;
    box.textContent = message ?? '';
    box.hidden = message === null;
  }

  private setLive(live: boolean): void {
    this.button('start').disabled = live;
    for (const action of ['stop', 'end']) this.button(action).disabled = !live;
    this.button('talk').disabled = !live || this.talkReason !== null;
    this.root.querySelector('input')!.disabled = !live;
    this.root.querySelector<HTMLButtonElement>('button[type="submit"]')!.disabled = !live;
    if (!live) this.button('talk').setAttribute('aria-pressed', 'false');
  }

  private setStatus(stage: string): void {
    const badge = this.root.querySelector<HTMLElement>('.badge')!;
    badge.textContent = stage;
    badge.dataset.stage = stage;
    this.root.querySelector('[data-status]')!.textContent = `Avatar ${stage}`;
  }

  private applyMode(): void {
    const mode = this.getAttribute('mode') ?? 'both';
    this.root.querySelector('form')!.hidden = mode === 'voice';
    this.button('talk').hidden = mode === 'text';
  }

  /** The text of the avatar's line for a turn (one line per turn, made on its first words). */
  private caption(turnId: string): HTMLSpanElement {
    let text = this.captions.get(turnId);
    if (!text) this.captions.set(turnId, (text = this.line('assistant', '')));
    return text;
  }

  /** A transcript line saying who spoke; answers its text, which an answer's words are appended to. */
  private line(role: 'user' | 'assistant', text: string): HTMLSpanElement {
    const list = this.root.querySelector('ol')!;
    const item = document.createElement('li');
    item.dataset.role = role;
    const who = document.createElement('span');
    who.className = 'who';
    who.textContent = role === 'user' ? 'You:' : 'Avatar:';
    const body = document.createElement('span');
    body.textContent = text;
    item.append(who, ' ', body);
    list.append(item);
    while (list.children.length > TRANSCRIPT_LINES_KEPT) list.firstElementChild!.remove();
    list.scrollTop = list.scrollHeight;
    return body;
  }

  private button(action: string): HTMLButtonElement {
    return this.root.querySelector<HTMLButtonElement>(`button[data-action="${action}"]`)!;
  }

  private dispatch(type: string, detail: unknown): void {
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }
}

if (!customElements.get('avatar-chat')) customElements.define('avatar-chat', AvatarChatElement);
