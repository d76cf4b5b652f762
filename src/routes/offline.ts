import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { HttpError, badRequest, conflict, notFound } from '../errors.ts';
import { requestOverrides, resolveTtsSelection, selectTts, sessionPersona } from '../sessions/index.ts';
import {
  InvalidSegmentError,
  OFFLINE_LIMITS,
  OfflineBundleRequest,
  prepareSegments,
  SegmentsTooLongError,
  segmentsOf,
} from '../recording/offline-input.ts';
import { closeAudioDecoder, describeDuration, uploadAdmission } from '../http/audio-uploads.ts';
import { closedSignal } from '../http/closed-signal.ts';
import type { StoredJob } from '../store/jobs.ts';

const JobStatusValue = Type.Union([
  Type.Literal('pending'),
  Type.Literal('running'),
  Type.Literal('complete'),
  Type.Literal('failed'),
]);

export const OfflineJobSubmitted = Type.Object(
  { job_id: Type.String({ format: 'uuid' }), status: Type.Literal('pending') },
  { $id: 'OfflineJobSubmitted' },
);

export const OfflineJobStatus = Type.Object(
  {
    job_id: Type.String({ format: 'uuid' }),
    status: JobStatusValue,
    progress: Type.Number({ minimum: 0, maximum: 1, description: 'Fraction done; never decreases' }),
    error: Type.Union([Type.String(), Type.Null()], { description: 'Why the job failed; null otherwise' }),
  },
  { $id: 'OfflineJobStatus', description: 'Offline bundle job (spec 2.5)' },
);

const JobParams = Type.Object({
  session_id: Type.String({ format: 'uuid', description: 'Session UUID4' }),
  job_id: Type.String({ description: 'Job UUID4' }),
});

const statusOf = (job: StoredJob) => ({
  job_id: job.job_id,
  status: job.status,
  progress: job.progress,
  error: job.error,
});

/** Offline MP4 rendering (spec 2.5, 3.4, 4.7); decisions in docs/recording.md. */
const offlineRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor, jobs, tts, config } = app.services;
  app.addSchema(OfflineBundleRequest);
  app.addSchema(OfflineJobSubmitted);
  app.addSchema(OfflineJobStatus);
  const admission = uploadAdmission(app.services);
  app.addHook('onClose', async () => closeAudioDecoder());

  /** A job of this session, or 404 (an unknown id and another session's job look the same). */
  async function jobOf(sessionId: string, jobId: string): Promise<StoredJob> {
    const job = await jobs.get(jobId);
    if (!job || job.session_id !== sessionId) throw notFound('job not found');
    return job;
  }

  app.post('/sessions/:session_id/rt-offline-bundle', {
    bodyLimit: OFFLINE_LIMITS.bodyBytes,
    // A service-wide upload slot before the (up to 12 MB) body is read and parsed; 503 past the cap.
    onRequest: async (_request, reply) => admission.admitUpload(reply),
    schema: {
      tags: ['offline'],
      summary: 'Submit an offline MP4 rendering job',
      description:
        'Renders the given speech with the session avatar, model and voice to an MP4 (H.264 + AAC) in the background, faster than real time. ' +
        'Give `text` or `segments` (text through TTS, or base64 audio). Works for live and terminated (tombstoned) sessions. ' +
        `Jobs run one at a time; at most ${OFFLINE_LIMITS.segments} segments, whose audio (with its pauses) may decode to at most ` +
        `${describeDuration(OFFLINE_LIMITS.audioMs)}. ` +
        '400 invalid body, unknown provider/voice or undecodable audio; 404 unknown session; 413 body over ' +
        `${OFFLINE_LIMITS.bodyBytes / 1024 / 1024} MB or audio decoding past its bound; ` +
        '503 (Retry-After) queue full or too many uploads in progress.',
      params: SessionIdParams,
      body: OfflineBundleRequest,
      response: { 200: Type.Ref('OfflineJobSubmitted'), ...errors(400, 404, 413, 503) },
    },
    handler: async (request, reply) => {
      const body = request.body as OfflineBundleRequest;
      const session = await supervisor.describe(request.params.session_id);
      const segments = segmentsOf(body);
      if (typeof segments === 'string') throw badRequest(segments);
      // The job's voice is the request's overrides on the session's persona; checked only if something is synthesised.
      const needsTts = segments.some((segment) => 'text' in segment);
      const voice = needsTts
        ? resolveTtsSelection((id) => tts.get(id), sessionPersona(session), requestOverrides(body))
        : selectTts(sessionPersona(session), requestOverrides(body));
      let prepared;
      try {
        prepared = await prepareSegments(segments, config.sampleRate, closedSignal(reply));
      } catch (error) {
        if (error instanceof InvalidSegmentError) throw badRequest(error.message);
        if (error instanceof SegmentsTooLongError) throw new HttpError(413, error.message);
        throw error;
      }
      const job = await jobs.submit({
        sessionId: session.session_id,
        avatarId: session.avatar_id,
        model: session.model,
        ttsProvider: voice.provider,
        voice: voice.voice,
        ttsModel: voice.model,
        segments: prepared,
      });
      void jobs.whenSettled(job.job_id).then(supervisor.liveSession(session.session_id)?.holdConsumer('offline_job'));
      return { job_id: job.job_id, status: 'pending' as const };
    },
  });

  app.get('/sessions/:session_id/rt-offline-bundle/:job_id', {
    schema: {
      tags: ['offline'],
      summary: 'Offline job status',
      description:
        '`pending` → `running` → `complete` | `failed`. 404 unknown job (or a job of another session, or expired).',
      params: JobParams,
      response: { 200: Type.Ref('OfflineJobStatus'), ...errors(404) },
    },
    handler: async (request) => statusOf(await jobOf(request.params.session_id, request.params.job_id)),
  });

  app.get('/sessions/:session_id/rt-offline-bundle/:job_id/download', {
    schema: {
      tags: ['offline'],
      summary: 'Download the offline MP4',
      description: '`video/mp4`. 404 unknown or expired job; 409 job not complete (pending, running or failed).',
      params: JobParams,
      produces: ['video/mp4'],
      response: { 200: Type.String({ format: 'binary', description: 'MP4 file' }), ...errors(404, 409) },
    },
    handler: async (request, reply) => {
      const job = await jobOf(request.params.session_id, request.params.job_id);
      if (job.status !== 'complete') throw conflict(`job is ${job.status}${job.error ? `: ${job.error}` : ''}`);
      const file = jobs.artifactPath(job.job_id);
      const stat = await fs.stat(file).catch(() => null);
      if (!stat) throw notFound('job artifact is gone');
      reply.header('content-type', 'video/mp4').header('content-length', stat.size);
      reply.header('content-disposition', `attachment; filename="bundle-${job.job_id}.mp4"`);
      return reply.send(createReadStream(file) as never);
    },
  });

  app.get('/sessions/:session_id/rt-offline-bundle/:job_id/captions.vtt', {
    schema: {
      tags: ['offline'],
      summary: "Download the offline bundle's captions",
      description:
        '`text/vtt`: the WebVTT captions beside the MP4, one cue per spoken sentence from its speech onset to the end of its ' +
        "audio on the MP4's timeline, by the rule live SSE `caption` events follow (docs/recording.md). Audio segments, which " +
        'have no text, have no cue. 404 unknown or expired job; 409 job not complete, as for the download.',
      params: JobParams,
      produces: ['text/vtt'],
      response: { 200: Type.String({ description: 'WebVTT file' }), ...errors(404, 409) },
    },
    handler: async (request, reply) => {
      const job = await jobOf(request.params.session_id, request.params.job_id);
      if (job.status !== 'complete') throw conflict(`job is ${job.status}${job.error ? `: ${job.error}` : ''}`);
      const text = await fs.readFile(jobs.captionsPath(job.job_id), 'utf8').catch(() => null);
      if (text === null) throw notFound('job captions are gone');
      reply.header('content-type', 'text/vtt; charset=utf-8');
      reply.header('content-disposition', `attachment; filename="bundle-${job.job_id}.vtt"`);
      return reply.send(text);
    },
  });
};

export default offlineRoutes;
