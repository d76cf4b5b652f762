import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { HttpError, conflict } from '../errors.ts';
import { PeerGoneError } from '../sessions/index.ts';
import { closedSignal } from '../http/closed-signal.ts';
import { EXAMPLE_OFFER_SDP } from '../schemas/sdp.ts';

/**
 * Bound on a WHEP offer body: the same 64 KiB the offer API's JSON `sdp` field allows (a browser's offer with
 * audio, video and a data section is ~5 KiB; the SDP checks refuse more than 16 media sections anyway).
 */
export const MAX_SDP_BODY_BYTES = 64 * 1024;

const SDP_CONTENT_TYPE = /^application\/sdp\s*(;|$)/i;

const ViewerParams = Type.Object({
  session_id: Type.String({ minLength: 1, maxLength: 128 }),
  viewer_id: Type.String({ minLength: 1, maxLength: 64 }),
});

const SdpBody = Type.String({
  minLength: 1,
  maxLength: MAX_SDP_BODY_BYTES,
  description: 'SDP offer (`application/sdp`)',
  examples: [EXAMPLE_OFFER_SDP],
});
const SdpAnswerBody = {
  description: 'SDP answer carrying its ICE candidates (non-trickle); `Location` names the viewer resource',
  headers: { Location: { type: 'string', description: '/sessions/{session_id}/whep/{viewer_id}' } },
  content: { 'application/sdp': { schema: Type.String() } },
};

/**
 * WHEP playback (draft-ietf-wish-whep; docs/streaming.md): any WebRTC player posts a raw SDP offer and watches the
 * session as one more send-only peer on the same media clock as the offer API. Non-trickle: PATCH answers 405.
 */
const whepRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;
  // The offer; and a trickle PATCH's fragment, read only so that it meets the 405 below rather than a 415.
  app.addContentTypeParser(
    ['application/sdp', 'application/trickle-ice-sdpfrag'],
    { parseAs: 'string', bodyLimit: MAX_SDP_BODY_BYTES },
    (_request, body, done) => done(null, body),
  );

  app.post('/sessions/:session_id/whep', {
    schema: {
      tags: ['webrtc'],
      summary: 'WHEP: watch the session',
      description:
        'Body: an SDP offer, `Content-Type: application/sdp`. Answers 201 with the SDP answer (`application/sdp`, candidates included: ' +
        'no trickle) and `Location: /sessions/{session_id}/whep/{viewer_id}` (readable cross-origin: `Access-Control-Expose-Headers`). ' +
        'The viewer gets the session’s audio and video on the same clock as the offer API’s peer, which it does not replace. ' +
        'On a client-rendered session the answer waits for the server renderer it opens to draw (0.1–2 s, at most 5 s). ' +
        'At most 8 viewers per session (`MAX_WHEP_VIEWERS`): 503 with Retry-After past it. 400 malformed SDP or one the WebRTC stack ' +
        'rejects; 404 unknown session; 409 terminated; 413 body over 64 KiB; 415 another content type.',
      params: SessionIdParams,
      consumes: ['application/sdp'],
      body: SdpBody,
      response: { 201: SdpAnswerBody, ...errors(400, 404, 409, 413, 415, 503) },
    },
    // Fastify parses text/plain and JSON too: WHEP accepts an SDP body only (before the body schema judges it).
    preValidation: async (request) => {
      if (!SDP_CONTENT_TYPE.test(request.headers['content-type'] ?? ''))
        throw new HttpError(415, 'WHEP offers are sent as Content-Type: application/sdp');
    },
    handler: async (request, reply) => {
      const sessionId = request.params.session_id;
      const session = await supervisor.requireSession(sessionId);
      try {
        const { viewerId, sdp } = await session.addViewer(request.body, closedSignal(reply));
        const location = `/sessions/${encodeURIComponent(sessionId)}/whep/${viewerId}`;
        return reply.code(201).type('application/sdp').header('location', location).send(sdp);
      } catch (error) {
        if (error instanceof PeerGoneError) throw conflict(error.message);
        throw error;
      }
    },
  });

  app.delete('/sessions/:session_id/whep/:viewer_id', {
    schema: {
      tags: ['webrtc'],
      summary: 'WHEP: stop watching',
      description:
        'Ends the viewer’s peer connection; the session and its other viewers go on. 404 unknown session or viewer.',
      params: ViewerParams,
      response: { 204: Type.Null({ description: 'Viewer ended' }), ...errors(404) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      session.removeViewer(request.params.viewer_id);
      return reply.code(204).send(null);
    },
  });

  app.patch('/sessions/:session_id/whep/:viewer_id', {
    schema: {
      tags: ['webrtc'],
      summary: 'WHEP: trickle ICE (not supported)',
      description: 'Always 405: answers carry all candidates (non-trickle), so there is nothing to patch.',
      params: ViewerParams,
      response: { ...errors(405) },
    },
    handler: async () => {
      throw new HttpError(405, 'trickle ICE is not supported: the answer carries all candidates', { allow: 'DELETE' });
    },
  });
};

export default whepRoutes;
