import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { InspectionEvent } from 'xstate';
import type { ModelType } from '../../actors/render/types.ts';
import type { TtsProvider, TtsProviderId } from '../../actors/tts/types.ts';
import type { LlmProvider } from '../../actors/llm/types.ts';
import type { AsrProvider } from '../../actors/asr/types.ts';
import { ConversationHistory } from '../../actors/llm/history.ts';
import type { FrameRenderer } from '../../actors/media/playout.ts';
import type { InferencePool } from '../../actors/inference/pool.ts';
import type { ServiceConfig } from '../config.ts';
import type { AvatarCatalog, CatalogEntry } from '../catalog/catalog.ts';
import { CLIENT_RENDERED_MODELS, type ModelRegistry } from '../models.ts';
import type { StoredSession } from '../store/sessions.ts';
import { BackendFailed, InvalidSelection, isOutOfFileDescriptors, outOfFileDescriptors } from '../domain-errors.ts';
import { errorForLog } from '../logger.ts';
import { defaultsPersona, requestOverrides, resolveTtsSelection } from './persona.ts';
import { SessionEventHub } from './event-hub.ts';
import { SessionBus } from './session-bus.ts';
import { SessionMedia } from './media.ts';
import { ClientRendering } from './client-render.ts';
import { SessionMetrics, type TurnObserver } from './metrics.ts';
import { Session, type SessionStage } from './session.ts';
import { smoothForRt } from './smoothing.ts';
import { followAttention } from './attention.ts';
import { checkToolDefinitions, SessionTools, type SessionToolDefinition, type ToolWebhookPolicy } from './tools.ts';
import { WebhookSigner } from '../../actors/upstream/webhook-signing.ts';

/** Conversation memory per session: enough for context, small enough for local models' windows. */
export const HISTORY_MAX_TURNS = 12;
export const HISTORY_MAX_CHARS = 12_000;

export interface RenderOpener {
  open(avatar: CatalogEntry, model: ModelType, signal?: AbortSignal): Promise<FrameRenderer & { close(): void }>;
}

/**
 * The live state inspector as the sessions see it (`src/inspect/inspection-hub.ts` implements it, from the floor
 * above): XState's inspection callback for a new session (undefined while the inspector is off), and its end.
 */
export interface SessionInspection {
  inspectorFor(sessionId: string): ((event: InspectionEvent) => void) | undefined;
  ended(sessionId: string): void;
}

/** A session's frame counters, read when it ends so the service totals never go backwards. */
export interface FrameCounts {
  sent: number;
  late: number;
}

/**
 * The service-wide metrics as the sessions see them (`src/metrics/service-metrics.ts` implements it, from the floor
 * above): they observe each turn's figures, follow each session's bus and count each session's end.
 */
export interface ServiceMetricsFeed {
  turnObserver(): TurnObserver;
  followSession(bus: SessionBus): void;
  sessionEnded(reason: string, frames: FrameCounts): void;
}

/** What assembling a session takes: the engines its stages drive and the service parts it reports to. */
export interface SessionFactoryDeps {
  config: ServiceConfig;
  catalog: AvatarCatalog;
  models: ModelRegistry;
  render: RenderOpener;
  tts(id: TtsProviderId): TtsProvider;
  llm: LlmProvider;
  asr: AsrProvider;
  logger: Logger;
  /** Service-wide persona defaults (customize endpoints without a session id). */
  defaults(): Promise<{ systemPrompt?: string; ttsProvider?: string; ttsVoice?: string | null }>;
  /** The live state inspector's feed; sessions are created with its `inspect` callback when it is on. */
  inspection?: SessionInspection;
  /** Service-wide Prometheus metrics (`GET /metrics`); each session's turns and frames feed it. */
  metrics?: ServiceMetricsFeed;
  /** The shared ONNX inference pool (voice activity detection); without it sessions have no voice input. */
  inference?: () => InferencePool;
  /** New session ids (UUID4); cluster mode's carry the node's routing slot (src/cluster/slots.ts). Default randomUUID. */
  newSessionId?: () => string;
}

export interface CreateSessionInput {
  avatar_id: string;
  model: string;
  tts_provider?: string | null;
  tts_voice?: string | null;
  llm_system_prompt?: string | null;
  lipsync_postprocess_mode?: string | null;
  /** Functions the model may call in chat turns (`tools.ts`). */
  tools?: SessionToolDefinition[];
  /** A callback URL of this session's own (checked against SERVICE_WEBHOOK_ALLOWED_HOSTS by the supervisor). */
  webhook_url?: string | null;
  /** 0..1, default 1: scales idle sway, breathing, nods and thinking cues. */
  motion?: number;
  /** Where the face is drawn: `server` (default) or `client` (the CPU models only, `CLIENT_RENDERED_MODELS`). */
  render?: 'server' | 'client';
}

/**
 * Builds a session from a `POST /sessions` request: checks what it picks (avatar, model, persona:
 * `InvalidSelection`), opens its renderer, and wires its parts — record, bus, SSE hub, media, stage context,
 * metrics, voice input — into one `Session`. It decides nothing about admission: the supervisor has taken the
 * pending slot before asking, and stores and supervises what comes back (or closes it).
 */
export class SessionFactory {
  /** Where webhook tools may point and how their requests are signed: the same for every session. */
  private readonly toolPolicy: ToolWebhookPolicy;

  constructor(private readonly deps: SessionFactoryDeps) {
    const { allowedHosts, secret } = deps.config.webhooks;
    this.toolPolicy = { allowedHosts, signer: secret ? new WebhookSigner(secret) : null };
  }

  async assemble(input: CreateSessionInput): Promise<Session> {
    const { catalog, models, config } = this.deps;
    const avatar = await catalog.get(input.avatar_id);
    if (!avatar) throw new InvalidSelection(`avatar_id "${input.avatar_id}" does not exist`);
    if (!models.isModel(input.model)) throw new InvalidSelection(`model "${input.model}" is not in the model list`);
    const modelInfo = models.info(input.model);
    const render = input.render ?? 'server';
    if (render === 'client' && !CLIENT_RENDERED_MODELS.includes(input.model)) {
      throw new InvalidSelection(
        `model "${input.model}" renders on the server only; render "client" is for the models ${CLIENT_RENDERED_MODELS.join(', ')}`,
      );
    }
    // A configured remote backend that failed its last check is tried again by the open below (502 if still down).
    if (!models.admits(input.model))
      throw new InvalidSelection(`model "${input.model}" is not connected: ${modelInfo.reason}`);
    if (!models.canRender(input.model, avatar.manifest.model_type)) {
      throw new InvalidSelection(
        `model "${input.model}" cannot render avatar "${avatar.id}" of model_type "${avatar.manifest.model_type}"; ` +
          `it renders ${modelInfo.renders.join(', ')}`,
      );
    }
    const defaults = await this.deps.defaults();
    const tts = resolveTtsSelection(
      this.deps.tts,
      defaultsPersona(config, defaults),
      requestOverrides({ tts_provider: input.tts_provider, voice: input.tts_voice }),
    );
    const tools = checkToolDefinitions(input.tools ?? [], this.toolPolicy);

    const model = input.model;
    const { width, height, fps } = avatar.manifest;
    const clientRendering =
      render === 'client'
        ? new ClientRendering({
            avatarId: avatar.id,
            model,
            width,
            height,
            fps,
            sampleRate: config.sampleRate,
            openServerRenderer: (signal) => this.deps.render.open(avatar, model, signal),
            logger: this.deps.logger,
          })
        : undefined;
    let renderer: FrameRenderer & { close(): void | Promise<void> };
    try {
      // A client-rendered session opens a server renderer only for its server-side outputs (`client-render.ts`).
      renderer = clientRendering ?? (await this.deps.render.open(avatar, model));
    } catch (error) {
      // The avatar's DELETE won the race for its files: the client named an avatar that no longer exists.
      if (!(await catalog.get(avatar.id))) throw new InvalidSelection(`avatar_id "${input.avatar_id}" does not exist`);
      // Out of descriptors is the service overloaded, not the backend failing: 503, retry later.
      if (isOutOfFileDescriptors(error)) throw outOfFileDescriptors();
      this.deps.logger.error({ model: input.model, err: errorForLog(error) }, 'renderer initialisation failed');
      // The same path-free text as the log: a filesystem error must not show the server's paths to clients.
      throw new BackendFailed(`rendering backend failed during initialization: ${errorForLog(error)}`);
    }

    const sessionId = this.deps.newSessionId?.() ?? randomUUID();
    const now = new Date().toISOString();
    const stored: StoredSession = {
      session_id: sessionId,
      avatar_id: avatar.id,
      model: input.model,
      tts_provider: tts.provider,
      tts_voice: tts.voice,
      tts_model: tts.model,
      llm_system_prompt: input.llm_system_prompt ?? defaults.systemPrompt ?? config.llmSystemPrompt,
      lipsync_postprocess_mode: input.lipsync_postprocess_mode ?? null,
      render,
      ...(input.webhook_url ? { webhook_url: input.webhook_url } : {}),
      ...(input.motion !== undefined ? { motion: input.motion } : {}),
      state: 'created',
      created_at: now,
      updated_at: now,
    };
    const logger = this.deps.logger.child({ sessionId });
    clientRendering?.useLogger(logger);
    const bus = new SessionBus((error, event) =>
      logger.error({ err: errorForLog(error), event }, 'session bus listener failed'),
    );
    const events = new SessionEventHub(bus);
    const media = new SessionMedia({
      renderer,
      reopenRenderer: clientRendering
        ? () => clientRendering.reopen()
        : (signal) => this.deps.render.open(avatar, model, signal),
      clientRendering,
      sampleRate: config.sampleRate,
      iceServers: config.iceServers,
      videoDelayMs: config.videoDelayMs,
      bus,
      logger,
    });
    if (input.motion !== undefined) media.setMotion(input.motion);
    followAttention(bus, media);
    const stage: SessionStage = {
      sessionId,
      sampleRate: config.sampleRate,
      logger,
      events: bus,
      media,
      history: new ConversationHistory({ maxTurns: HISTORY_MAX_TURNS, maxChars: HISTORY_MAX_CHARS }),
      tts: this.deps.tts,
      llm: this.deps.llm,
      tools: new SessionTools({
        sessionId,
        bus,
        logger,
        policy: this.toolPolicy,
        fillerText: config.toolFillerText,
        definitions: tools,
      }),
      thinkingFillerText: config.thinkingFillerText,
      asr: this.deps.asr,
      metrics: new SessionMetrics(this.deps.metrics?.turnObserver()),
      smoothAudio: (pcm) => smoothForRt(pcm, config.sampleRate),
    };
    this.deps.metrics?.followSession(bus);
    const inference = this.deps.inference;
    const voice = inference && {
      pool: inference,
      asr: this.deps.asr,
      silenceMs: config.vadSilenceMs,
      minSpeechMs: config.vadMinSpeechMs,
    };
    return new Session(stored, bus, events, media, stage, logger, this.deps.inspection?.inspectorFor(sessionId), voice);
  }
}
