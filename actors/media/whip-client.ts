import wrtc from '@roamhq/wrtc';
import { fetchUpstream, readBoundedText, type FetchLike } from '../upstream/http.ts';
import { waitForIceGathering, withVideoBitrateCap, type IceServer, type WebRtcOutput } from './webrtc.ts';

const { RTCPeerConnection } = wrtc;

/** Bound on the WHIP server answering the offer (RFC 9725 §4.2): a media server answers in milliseconds; longer is a dead one. */
export const WHIP_REQUEST_TIMEOUT_MS = 10_000;
/** Bound on ICE + DTLS after the answer: on a reachable server seconds at most; past it the push failed. */
export const WHIP_CONNECT_TIMEOUT_MS = 15_000;
/** Bound on the DELETE that ends the WHIP session: best effort, the server times the session out anyway. */
export const WHIP_DELETE_TIMEOUT_MS = 3_000;
/** Bound on the answer's SDP: the same 64 KiB the service accepts for offers. */
export const MAX_WHIP_ANSWER_BYTES = 64 * 1024;
/** A connection `disconnected` this long (ICE lost, no recovery) counts as dropped. */
export const WHIP_DISCONNECTED_GRACE_MS = 5_000;

/** The WHIP server refused, could not be reached, or dropped the push; the message carries no URL or token. */
export class WhipPushError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WhipPushError';
  }
}

/** One live WHIP push: `ended` resolves with why it stopped on its own; `close` ends it (DELETE; idempotent). */
export interface WhipPush {
  readonly ended: Promise<string>;
  close(): Promise<void>;
}

/**
 * Pushes the session's media to a WHIP endpoint (RFC 9725): a send-only peer fed by the session's WebRTC sources
 * (`WebRtcOutput.openFeed`: the same clock as every viewer), the offer POSTed as `application/sdp` with the bearer
 * token, the answer applied, the resource `Location` kept for the DELETE. Resolves once the connection is up. The
 * token goes to the WHIP URL's origin only: redirects are not followed (3xx fails the push) and a `Location` on
 * another origin fails it too, so neither the offer nor the DELETE ever reaches another server.
 */
export async function startWhipPush(options: {
  output: WebRtcOutput;
  url: string;
  bearerToken?: string;
  iceServers?: IceServer[];
  signal: AbortSignal;
  fetchImpl?: FetchLike;
}): Promise<WhipPush> {
  const { output, url, bearerToken, signal, fetchImpl = fetch } = options;
  const peer = new RTCPeerConnection({ iceServers: options.iceServers ?? [] });
  let resolveEnded!: (reason: string) => void;
  const ended = new Promise<string>((resolve) => (resolveEnded = resolve));
  const feed = output.openFeed(() => resolveEnded('media output closed'));
  let resource: string | null = null;
  let closing: Promise<void> | null = null;
  const auth: Record<string, string> = bearerToken ? { authorization: `Bearer ${bearerToken}` } : {};
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      resolveEnded('stopped');
      feed.release();
      peer.close();
      if (!resource) return;
      await fetchImpl(resource, {
        method: 'DELETE',
        headers: auth,
        redirect: 'manual',
        signal: AbortSignal.timeout(WHIP_DELETE_TIMEOUT_MS),
      }).then(
        (response) => response.body?.cancel(),
        () => undefined,
      );
    })());
  try {
    for (const track of feed.tracks) peer.addTransceiver(track, { direction: 'sendonly', streams: [feed.stream] });
    await peer.setLocalDescription(await peer.createOffer());
    await waitForIceGathering(peer, signal);
    const response = await fetchUpstream(fetchImpl, url, {
      method: 'POST',
      headers: { 'content-type': 'application/sdp', ...auth },
      body: peer.localDescription!.sdp,
      // A redirect would re-send the offer and the token wherever it points: a 3xx is a failure like any non-2xx.
      redirect: 'manual',
      signal,
      provider: 'whip',
      headersTimeoutMs: WHIP_REQUEST_TIMEOUT_MS,
    }).catch((error: Error) => {
      throw new WhipPushError(signal.aborted ? 'aborted' : describeWithoutUrl(error));
    });
    const location = response.headers.get('location');
    const answer = await readBoundedText(response, 'whip', MAX_WHIP_ANSWER_BYTES);
    if (response.status !== 201 || !location)
      throw new WhipPushError(`WHIP server answered ${response.status}${location ? '' : ' without Location'}`);
    const named = new URL(location, url);
    // The DELETE carries the token: only to the origin the client gave it for.
    if (named.origin !== new URL(url).origin) throw new WhipPushError('WHIP server named a resource on another origin');
    resource = named.href;
    // The media server's answer, capped as every viewer's offer is (`VIDEO_MAX_BITRATE_KBPS`).
    await peer.setRemoteDescription({ type: 'answer', sdp: withVideoBitrateCap(answer) }).catch((error: Error) => {
      throw new WhipPushError(`WHIP answer rejected: ${error.message}`);
    });
    await waitForConnected(peer, signal);
    feed.firstPicture();
    watchConnection(peer, resolveEnded);
    return { ended, close };
  } catch (error) {
    await close();
    throw error instanceof WhipPushError ? error : new WhipPushError((error as Error).message);
  }
}

/** Upstream errors name the provider and status; the URL (it may hold a key) never reaches the message. */
function describeWithoutUrl(error: Error): string {
  return error.message.replace(/\b(?:https?|rtmps?):\/\/\S+/gi, '<url>');
}

function waitForConnected(peer: InstanceType<typeof RTCPeerConnection>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (error?: Error): void => {
      clearTimeout(timer);
      peer.removeEventListener('connectionstatechange', onChange);
      signal.removeEventListener('abort', onAbort);
      if (error) reject(error);
      else resolve();
    };
    const onChange = (): void => {
      if (peer.connectionState === 'connected') done();
      else if (peer.connectionState === 'failed' || peer.connectionState === 'closed')
        done(new WhipPushError(`WHIP connection ${peer.connectionState}`));
    };
    const onAbort = (): void => done(new WhipPushError('aborted'));
    const timer = setTimeout(
      () => done(new WhipPushError(`WHIP connection not up within ${WHIP_CONNECT_TIMEOUT_MS} ms`)),
      WHIP_CONNECT_TIMEOUT_MS,
    );
    peer.addEventListener('connectionstatechange', onChange);
    signal.addEventListener('abort', onAbort, { once: true });
    onChange();
  });
}

/** Reports a connection that failed, closed, or stayed disconnected past the grace. */
function watchConnection(peer: InstanceType<typeof RTCPeerConnection>, ended: (reason: string) => void): void {
  let grace: NodeJS.Timeout | undefined;
  peer.addEventListener('connectionstatechange', () => {
    clearTimeout(grace);
    const state = peer.connectionState;
    if (state === 'failed' || state === 'closed') ended(`WHIP connection ${state}`);
    else if (state === 'disconnected')
      grace = setTimeout(() => ended('WHIP connection lost'), WHIP_DISCONNECTED_GRACE_MS).unref();
  });
}
