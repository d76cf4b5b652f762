import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Nullable, SessionIdParams, errors } from '../schemas/common.ts';

const TurnMetrics = Type.Object({
  turn_id: Type.String(),
  mode: Type.String({
    description:
      'speak, chat, audio, audio_stream, transcribe or voice (hands-free: timed from the end of the user’s turn)',
  }),
  started_at: Type.String({ format: 'date-time' }),
  transcript_ms: Nullable(
    Type.Integer({ description: 'Request (voice: end of turn) → final transcript (transcribe, voice)' }),
  ),
  llm_first_token_ms: Nullable(Type.Integer({ description: 'Request → first language-model token (chat)' })),
  first_audio_queued_ms: Nullable(
    Type.Integer({ description: 'Request → first synthesised or uploaded audio queued for playout' }),
  ),
  first_sample_sent_ms: Nullable(Type.Integer({ description: "Request → the turn's first sample handed to WebRTC" })),
  duration_ms: Nullable(Type.Integer({ description: 'Request → the turn ended; null while running' })),
  outcome: Type.Union(
    [
      Type.Literal('running'),
      Type.Literal('completed'),
      Type.Literal('interrupted'),
      Type.Literal('paused'),
      Type.Literal('error'),
      Type.Literal('terminated'),
    ],
    {
      description:
        'How the session machine ended the turn: completed (its audio played out), interrupted, paused, error or terminated',
    },
  ),
  interrupt_to_flush_ms: Nullable(
    Type.Integer({ description: 'Interrupt request → playout flushed (the next 10 ms chunk is silence)' }),
  ),
});

const SessionMetricsBody = Type.Object(
  {
    session_id: Type.String({ format: 'uuid' }),
    state: Type.String(),
    pipeline: Type.String(),
    media: Type.Object({
      fps: Type.Number(),
      media_ms: Type.Integer({
        description: 'Media clock: audio time handed to WebRTC since the session was started (0 before start)',
      }),
      queued_speech_ms: Type.Integer({ description: 'Speech waiting in the playout queue' }),
      frames_sent: Type.Integer(),
      frames_late: Type.Integer({
        description: 'Frames that left more than one frame period after their presentation time',
      }),
      video_delay_ms: Type.Integer({ description: 'SERVICE_VIDEO_DELAY_MS: video held behind audio on the wire' }),
      peer_connected: Type.Boolean(),
      sse_consumers: Type.Integer(),
      poses_sent: Type.Optional(
        Type.Integer({ description: 'Client-rendered sessions: poses sent on the `avatar` data channel' }),
      ),
      poses_late: Type.Optional(
        Type.Integer({
          description: 'Client-rendered sessions: poses sent after their audio had left the media clock',
        }),
      ),
      poses_skipped: Type.Optional(
        Type.Integer({
          description: 'Client-rendered sessions: poses not sent because the channel held too much unsent data',
        }),
      ),
      audio_packets_sent: Type.Optional(
        Type.Integer({
          description:
            'Client-rendered sessions: 20 ms Opus packets of channel audio sent on the `avatar` data channel',
        }),
      ),
      audio_packets_late: Type.Optional(
        Type.Integer({
          description:
            'Client-rendered sessions: channel audio packets sent after some of their speech had left the media clock',
        }),
      ),
      audio_packets_skipped: Type.Optional(
        Type.Integer({
          description:
            'Client-rendered sessions: channel audio packets not sent because the channel held too much unsent data',
        }),
      ),
    }),
    summary: Type.Object({
      first_sample_sent_ms_p50: Nullable(Type.Number()),
      first_sample_sent_ms_p95: Nullable(Type.Number()),
      llm_first_token_ms_p50: Nullable(Type.Number()),
      interrupt_to_flush_ms_max: Nullable(Type.Number()),
    }),
    turns: Type.Array(TurnMetrics, { description: 'The last 50 turns, oldest first' }),
  },
  { $id: 'SessionMetrics' },
);

const ServiceMetricsBody = Type.Object(
  {
    sessions: Type.Object({
      live: Type.Integer({ description: 'Sessions not terminated' }),
      pending: Type.Integer({ description: 'Created but not started, plus creations in progress' }),
      pending_capacity: Type.Integer({ description: 'SERVICE_MAX_PENDING_SESSIONS' }),
      active: Type.Integer({ description: 'Running or paused' }),
      capacity: Type.Integer({ description: 'SERVICE_MAX_SESSIONS' }),
    }),
    sessions_terminated_total: Type.Object(
      {
        orphaned: Type.Integer({ description: 'Started sessions without any consumer for SERVICE_ORPHAN_TIMEOUT_S' }),
        not_started_in_time: Type.Integer({
          description: 'Created sessions not started within SERVICE_START_TIMEOUT_MS',
        }),
      },
      { description: 'Sessions the service terminated by itself since it started' },
    ),
  },
  { $id: 'ServiceMetrics' },
);

/** A few lines of what `GET /metrics` answers, for the OpenAPI document. */
const PROMETHEUS_EXAMPLE = [
  '# HELP avatar_sessions Live sessions by state: created (not started), running, paused, creating (POST /sessions in progress)',
  '# TYPE avatar_sessions gauge',
  'avatar_sessions{state="running"} 2',
  '# HELP avatar_speak_first_audio_seconds POST /speak accepted → first audio sample handed to WebRTC',
  '# TYPE avatar_speak_first_audio_seconds histogram',
  'avatar_speak_first_audio_seconds_bucket{le="0.15"} 41',
  'avatar_speak_first_audio_seconds_bucket{le="+Inf"} 42',
  'avatar_speak_first_audio_seconds_sum 5.61',
  'avatar_speak_first_audio_seconds_count 42',
].join('\n');

/**
 * Whether an Accept header asks for JSON rather than the Prometheus text: `application/json` listed with a higher
 * quality than anything text (`text/plain`, `application/openmetrics-text`, `text/*`, `*\/*`). Prometheus and curl
 * (no header or `*\/*`) get the text format.
 */
export function prefersJson(accept: string | undefined): boolean {
  if (!accept) return false;
  let json = -1;
  let text = -1;
  for (const part of accept.split(',')) {
    const [type = '', ...params] = part.trim().toLowerCase().split(';');
    const qParam = params.map((param) => param.trim()).find((param) => param.startsWith('q='));
    const q = qParam ? Number(qParam.slice(2)) : 1;
    if (!Number.isFinite(q)) continue;
    const mediaType = type.trim();
    if (mediaType === 'application/json') json = Math.max(json, q);
    else if (['text/plain', 'application/openmetrics-text', 'text/*', '*/*'].includes(mediaType))
      text = Math.max(text, q);
  }
  return json > 0 && json > text;
}

/** Latency and media health of a live session, so deployments can measure what their users get. */
const metricsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor, config, metrics } = app.services;
  app.get('/metrics', {
    schema: {
      tags: ['health'],
      summary: 'Prometheus metrics (JSON session counters with Accept: application/json)',
      description:
        'Prometheus text exposition format 0.0.4 (prom-client): sessions by state, turns by kind and outcome, latency histograms ' +
        '(speak → first audio, chat first token, TTS first audio, end of speech → first audio, interrupt → silence), frames sent ' +
        'and late, render/inference pool load, event-loop lag and the default process metrics, all prefixed `avatar_` ' +
        '(docs/metrics.md). A client whose Accept header prefers `application/json` gets the service-wide session counters ' +
        'as JSON instead: slots in use and sessions the service ended by itself.',
      produces: ['text/plain', 'application/json'],
      response: {
        200: {
          description: 'Prometheus text, or the JSON session counters',
          content: {
            'text/plain': { schema: Type.String({ example: PROMETHEUS_EXAMPLE }) },
            'application/json': { schema: ServiceMetricsBody },
          },
        },
      },
    },
    handler: async (request, reply) => {
      if (prefersJson(request.headers.accept)) {
        return reply.type('application/json').send({
          sessions: {
            live: supervisor.liveCount,
            pending: supervisor.pendingCount,
            pending_capacity: supervisor.pendingCapacity,
            active: supervisor.activeCount,
            capacity: supervisor.capacity,
          },
          sessions_terminated_total: { ...supervisor.terminations },
        });
      }
      const { contentType, body } = await metrics.render();
      return reply.type(contentType).header('cache-control', 'no-store').send(body);
    },
  });

  app.get('/sessions/:session_id/metrics', {
    schema: {
      tags: ['sessions'],
      summary: 'Session latency and media metrics',
      description:
        "Per turn: time to the language model's first token, to the first audio queued and to the first sample handed to WebRTC, " +
        'duration, outcome and interrupt → flush time; plus the media clock, late frames and queued speech. ' +
        'Times are measured inside the service; the network and the receiver add their own (see docs/performance.md).',
      params: SessionIdParams,
      response: { 200: SessionMetricsBody, ...errors(404, 409) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      const media = session.mediaFigures();
      return {
        session_id: session.id,
        state: session.state,
        pipeline: session.pipelineStage,
        media: {
          fps: media.fps,
          media_ms: Math.round(media.mediaMs),
          queued_speech_ms: Math.round(media.queuedSpeechMs),
          frames_sent: media.sentFrames,
          frames_late: media.lateFrames,
          video_delay_ms: config.videoDelayMs,
          peer_connected: media.peerConnected,
          sse_consumers: media.sseConsumers,
          ...(media.poses
            ? {
                poses_sent: media.poses.sentPoses,
                poses_late: media.poses.latePoses,
                poses_skipped: media.poses.skippedPoses,
                audio_packets_sent: media.poses.sentAudioPackets,
                audio_packets_late: media.poses.lateAudioPackets,
                audio_packets_skipped: media.poses.skippedAudioPackets,
              }
            : {}),
        },
        ...session.metricsSnapshot(),
      };
    },
  });
};

export default metricsRoutes;
