import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { conflict } from '../errors.ts';
import { PeerGoneError } from '../sessions/index.ts';
import { closedSignal } from '../http/closed-signal.ts';
import { SdpAnswer, SdpOffer } from '../schemas/sdp.ts';

/** WebRTC signaling: one offer/answer exchange, non-trickle ICE; a new offer replaces the previous peer. */
const webrtcRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.post('/sessions/:session_id/webrtc/offer', {
    schema: {
      tags: ['webrtc'],
      summary: 'Exchange SDP',
      description:
        'Answers with one audio and one video track. Candidates are gathered before answering (non-trickle). ' +
        'An audio section offered sendrecv carries the user’s microphone (hands-free conversation: voice activity detection, ' +
        'turn-taking and barge-in, docs/voice-input.md); recvonly is answered as before. ' +
        'A new offer replaces the previous peer connection. Offers on one session are answered one at a time: the one being ' +
        'answered finishes (200), one that is still waiting when a newer offer arrives gets 409. 400 malformed SDP or one the ' +
        'WebRTC stack rejects (the current peer stays connected); 404 unknown session; 409 terminated or superseded.',
      params: SessionIdParams,
      body: SdpOffer,
      response: { 200: SdpAnswer, ...errors(400, 404, 409) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      let answer: { sdp: string; type: 'answer' };
      try {
        answer = await session.answerOffer(request.body.sdp, closedSignal(reply));
      } catch (error) {
        // Terminated or superseded while waiting: a conflict with another request, not a server fault.
        if (error instanceof PeerGoneError) throw conflict(error.message);
        throw error;
      }
      return answer;
    },
  });
};

export default webrtcRoutes;
