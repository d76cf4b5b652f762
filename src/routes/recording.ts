import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { HttpError, conflict, notFound } from '../errors.ts';
import { RecordingConflictError, RecordingFailedError } from '../recording/registry.ts';
import { NoFramesError } from '../recording/clock-recorder.ts';

export const RecordingStatusBody = Type.Object(
  {
    state: Type.Union([Type.Literal('idle'), Type.Literal('recording'), Type.Literal('complete')]),
    artifact_url: Type.String({ description: 'Download URL of the MP4; answers 404 until state is `complete`' }),
    duration_ms: Type.Integer({
      minimum: 0,
      description: 'Recorded length so far (recording), final length (complete), 0 (idle)',
    }),
  },
  { $id: 'RecordingStatus', description: 'Recording status (spec 2.5)' },
);

/** Maps registry errors onto the documented statuses. */
function asHttp(error: unknown): never {
  if (error instanceof RecordingConflictError) throw conflict(error.message);
  if (error instanceof NoFramesError) throw new HttpError(502, `rendering backend failed: ${error.message}`);
  if (error instanceof RecordingFailedError) throw new HttpError(500, 'recording could not be finalised');
  throw error;
}

/** Session recording (spec 2.5, 3.3, 4.7); decisions in docs/recording.md. */
const recordingRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor, recordings } = app.services;
  app.addSchema(RecordingStatusBody);
  const statusRef = Type.Ref('RecordingStatus');

  app.post('/sessions/:session_id/rt-recording/start', {
    schema: {
      tags: ['recording'],
      summary: 'Start recording the session',
      description:
        'Records exactly what a WebRTC viewer receives (the session playout clock) into an MP4 (H.264 + AAC, the avatar size and fps), ' +
        'streamed to disk. Allowed while the session is running or paused (idle frames are recorded too). A new start after `complete` ' +
        'discards the previous artifact. 404 unknown session; 409 already recording, session not started yet (its media clock runs from ' +
        'start), or terminated or being deleted (a DELETE racing the start wins: the start answers 409 and nothing is recorded). ' +
        'On a client-rendered session (`render: "client"`) it answers once the server renderer it opens draws (0.1–2 s, at most 5 s): ' +
        'the recording holds all that plays from the answer on, beginning with the face.',
      params: SessionIdParams,
      response: { 200: statusRef, ...errors(404, 409) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      try {
        // The session admits the recording (409 before start, or once it is ending) in the step that attaches it to its
        // close cascade, which finalises it after the clock stopped and before SSE clients hear session.terminated.
        return await session.startRecording(recordings);
      } catch (error) {
        asHttp(error);
      }
    },
  });

  app.post('/sessions/:session_id/rt-recording/stop', {
    schema: {
      tags: ['recording'],
      summary: 'Stop recording and finalise the MP4',
      description:
        'Answers once the file is complete, with state `complete`. The audio is cut to the last recorded frame. ' +
        '404 unknown session; 409 not recording; 502 when the renderer produced no frame at all.',
      params: SessionIdParams,
      response: { 200: statusRef, ...errors(404, 409, 502) },
    },
    handler: async (request) => {
      const id = request.params.session_id;
      await supervisor.describe(id);
      try {
        return await recordings.stop(id);
      } catch (error) {
        asHttp(error);
      }
    },
  });

  app.get('/sessions/:session_id/rt-recording', {
    schema: {
      tags: ['recording'],
      summary: 'Recording state',
      description:
        'Also answers for a terminated session while its tombstone is kept, so a recording finalised by DELETE stays reachable.',
      params: SessionIdParams,
      response: { 200: statusRef, ...errors(404) },
    },
    handler: async (request) => {
      await supervisor.describe(request.params.session_id);
      return recordings.status(request.params.session_id);
    },
  });

  app.get('/sessions/:session_id/rt-recording/artifact', {
    schema: {
      tags: ['recording'],
      summary: 'Download the recording',
      description:
        '`video/mp4`. 404 when the session is unknown or there is no finished recording (idle, or recording in progress).',
      params: SessionIdParams,
      produces: ['video/mp4'],
      response: { 200: Type.String({ format: 'binary', description: 'MP4 file' }), ...errors(404) },
    },
    handler: async (request, reply) => {
      await supervisor.describe(request.params.session_id);
      const file = await recordings.artifactPath(request.params.session_id);
      if (!file) throw notFound('no finished recording for this session');
      // The retention sweep may remove it between the lookup and here: still a 404, not a 500.
      const stat = await fs.stat(file).catch(() => null);
      if (!stat) throw notFound('no finished recording for this session');
      reply.header('content-type', 'video/mp4').header('content-length', stat.size);
      reply.header('content-disposition', `attachment; filename="recording-${request.params.session_id}.mp4"`);
      return reply.send(createReadStream(file) as never);
    },
  });

  app.get('/sessions/:session_id/rt-recording/captions.vtt', {
    schema: {
      tags: ['recording'],
      summary: "Download the recording's captions",
      description:
        '`text/vtt`: the WebVTT captions of the finished recording, one cue per SSE `caption` event sent while it recorded, ' +
        "on the MP4's timeline (docs/recording.md). A recording without speech has a file with no cue. 404 when the session is " +
        'unknown or there is no finished recording (idle, or recording in progress), as for the artifact.',
      params: SessionIdParams,
      produces: ['text/vtt'],
      response: { 200: Type.String({ description: 'WebVTT file' }), ...errors(404) },
    },
    handler: async (request, reply) => {
      await supervisor.describe(request.params.session_id);
      const file = await recordings.captionsPath(request.params.session_id);
      const text = file ? await fs.readFile(file, 'utf8').catch(() => null) : null;
      if (text === null) throw notFound('no finished recording for this session');
      reply.header('content-type', 'text/vtt; charset=utf-8');
      reply.header('content-disposition', `attachment; filename="recording-${request.params.session_id}.vtt"`);
      return reply.send(text);
    },
  });
};

export default recordingRoutes;
