import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { conflict } from '../errors.ts';
import { PeerGoneError } from '../../actors/media/webrtc.ts';

const SdpOffer = Type.Object(
  {
    sdp: Type.String({ minLength: 1, maxLength: 65536, description: 'SDP offer' }),
    type: Type.Literal('offer'),
  },
  { $id: 'SdpOffer' },
);
const SdpAnswer = Type.Object({ sdp: Type.String(), type: Type.Literal('answer') }, { $id: 'SdpAnswer' });

/** WebRTC signaling: one offer/answer exchange, non-trickle ICE; a new offer replaces the previous peer. */
const webrtcRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.post('/sessions/:session_id/webrtc/offer', {
    schema: {
      tags: ['webrtc'],
      summary: 'Exchange SDP',
      description:
        'Answers with one audio and one video track. Candidates are gathered before answering (non-trickle). ' +
        'A new offer replaces the previous peer connection. 400 malformed SDP; 404 unknown session; 409 terminated.',
      params: SessionIdParams,
      body: SdpOffer,
      response: { 200: SdpAnswer, ...errors(400, 404, 409) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      let answer: { sdp: string; type: 'answer' };
      try {
        answer = await session.media.output.answer(request.body.sdp);
      } catch (error) {
        // Terminated or replaced while gathering candidates: a conflict with another request, not a server fault.
        if (error instanceof PeerGoneError) throw conflict(error.message);
        throw error;
      }
      session.logger.info('webrtc peer connected');
      return answer;
    },
  });
};

export default webrtcRoutes;
