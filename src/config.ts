import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { isTtsProviderId, TTS_PROVIDER_IDS, type TtsProviderId } from '../actors/tts/types.ts';
import type { TtsEndpointConfig, TtsProvidersConfig } from '../actors/tts/registry.ts';
import { envVarName } from '../actors/tts/providers/common.ts';
import { DEFAULT_VIDEO_DELAY_MS } from '../actors/media/playout.ts';
import { DEFAULT_MIN_SILENCE_MS, DEFAULT_MIN_SPEECH_MS } from '../actors/vad/silero.ts';
import { isWebhookSecret } from '../actors/upstream/webhook-signing.ts';
import { EXPRESSION_TAGS_PROMPT } from '../actors/llm/expression-tags.ts';

/**
 * Every `SERVICE_*` variable the service reads, validated once at start-up.
 * `docs/configuration.md` lists them with defaults and meaning; keep both in step.
 */
export interface ServiceConfig {
  host: string;
  port: number;
  dataDir: string;
  avatarsDir: string;
  /** SERVICE_CORS_ORIGINS: origins (scheme://host[:port]) whose pages may call the service, or `*`. */
  corsOrigins: string[];
  /**
   * SERVICE_ALLOWED_HOSTS: Host header names answered besides the bind address, `localhost`, the public base
   * URL's and the node URL's host (docs/security.md); `.example.com` = that domain and its subdomains, `*` = any.
   */
  allowedHosts: string[];
  publicBaseUrl: string;
  ttsDefaultProvider: TtsProviderId;
  ttsDefaultVoice: string | null;
  /** Every TTS provider's endpoint and key (`SERVICE_TTS_<ID>_BASE_URL` / `_API_KEY`), the voice dir and the public base URL. */
  tts: TtsProvidersConfig;
  llmSystemPrompt: string;
  llm: { baseUrl: string | null; apiKey: string | null; model: string };
  /** SERVICE_TOOL_FILLER_TEXT: a short sentence said once per turn while tools run longer than ~1 s; null = silence. */
  toolFillerText: string | null;
  /**
   * SERVICE_THINKING_FILLER_TEXT: a short sentence said once in a chat turn when no reply sentence has gone to speech
   * ~1 s after the user's turn ended or the chat request came (`actors/llm/filler.ts`); null = silence (the default).
   */
  thinkingFillerText: string | null;
  asr: { baseUrl: string | null; apiKey: string | null; model: string };
  maxSessions: number;
  /**
   * SERVICE_MAX_CONNECTIONS: open client connections (HTTP, SSE, WebSocket) at once; the kernel's next one is
   * closed at once. Default: a share of the open-files limit (`defaultMaxConnections`), so connections alone can
   * never use up the descriptors that files, pipes, workers and peers need.
   */
  maxConnections: number;
  /** Sessions created but not started, at most (POST /sessions answers 503 beyond). */
  maxPendingSessions: number;
  /** A created session not started within this is terminated. */
  startTimeoutMs: number;
  /** A started session without any consumer (SSE, WebRTC peer, audio WebSocket, recording, job, REST call) this long is terminated; 0 = never. */
  orphanTimeoutMs: number;
  logLevel: string;
  /** `auto`: readable lines on a terminal, JSON lines otherwise (`src/main.ts` decides from stdout). */
  logFormat: 'json' | 'pretty' | 'auto';
  sampleRate: number;
  iceServers: Array<{ urls: string | string[]; username?: string; credential?: string }>;
  tombstoneRetentionMs: number;
  renderThreads: number;
  videoDelayMs: number;
  /** SERVICE_RTMP_VIDEO_BITRATE_KBPS: H.264 bitrate of RTMP outputs (docs/streaming.md). */
  rtmpVideoBitrateKbps: number;
  ttsPreviewMaxChars: number;
  /** The live state inspector (`/inspect`): shows user text and session ids, so off unless SERVICE_INSPECTOR=on. */
  inspector: boolean;
  /** SERVICE_VAD_SILENCE_MS: silence that ends the user's turn in hands-free conversation (docs/voice-input.md). */
  vadSilenceMs: number;
  /** SERVICE_VAD_MIN_SPEECH_MS: shorter sounds are no turn (coughs, clicks); also the least speech that barges in. */
  vadMinSpeechMs: number;
  /** Neural lip-sync (docs/renderers.md): `lipsync_b` runs a local ONNX file, `lipsync_c` a model on a KServe v2 / Triton server. */
  lipsync: {
    /** SERVICE_LIPSYNC_B_MODEL: path of a Wav2Lip-family `.onnx` file; null = `lipsync_b` not configured. */
    bModel: string | null;
    /** SERVICE_LIPSYNC_C_URL: the inference server's base URL; null = `lipsync_c` not configured. */
    cUrl: string | null;
    /** SERVICE_LIPSYNC_C_MODEL: the model's name on that server. */
    cModel: string;
    /** SERVICE_ONNX_PROVIDER: onnxruntime execution provider for local models (`cuda` needs onnxruntime-node's GPU build). */
    onnxProvider: 'cpu' | 'cuda';
  };
  /** Cluster mode (`SERVICE_REDIS_URL`); null = one node, LevelDB, nothing shared (docs/scaling.md). */
  cluster: ClusterConfig | null;
  /** Signed event callbacks (docs/integration.md, `## Webhooks`). */
  webhooks: WebhookConfig;
}

export interface WebhookConfig {
  /** SERVICE_WEBHOOK_URL: where every event goes; null = no service-wide receiver. */
  url: string | null;
  /** SERVICE_WEBHOOK_SECRET: the Standard Webhooks secret (`whsec_…`) events and webhook tools are signed with. */
  secret: string | null;
  /**
   * SERVICE_WEBHOOK_ALLOWED_HOSTS: the only hosts a per-session callback URL (and a webhook tool) may name: the
   * service has no auth, so an open callback URL would let anyone make it call anywhere. Lower case; `.example.com`
   * is the domain and its subdomains.
   */
  allowedHosts: string[];
}

export interface ClusterConfig {
  redisUrl: string;
  /** How other nodes reach this one (forwarded requests): `SERVICE_NODE_URL`, default `http://SERVICE_HOST:SERVICE_PORT`. */
  nodeUrl: string;
  /** A node whose heartbeat is older than this is lost: its sessions are terminated (`node_lost`). */
  nodeTtlMs: number;
  /**
   * `SERVICE_NODE_SLOT`: the routing slot this node claims (its line in the balancer's map, docs/scaling.md);
   * null = the lowest free slot. Session ids carry their owner's slot, so a sticky balancer finds the owner.
   */
  nodeSlot: number | null;
  /**
   * `SERVICE_CLUSTER_SECRET`: the key nodes sign their internal headers with; null = one random secret the
   * first node creates in Redis (SET NX) and every node reads.
   */
  secret: string | null;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

/** A filler (tools, thinking) is one short sentence said while the user waits; a paragraph would outlast the wait. */
const MAX_FILLER_CHARS = 200;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
/** The built-in persona, with the sentence that teaches the model the expression tags the service strips (`[smile]`). */
const DEFAULT_SYSTEM_PROMPT = `You are a friendly talking avatar. Answer in short spoken sentences without markdown, lists or emoji. ${EXPRESSION_TAGS_PROMPT}`;

export function loadConfig(env: Record<string, string | undefined> = process.env, cwd = process.cwd()): ServiceConfig {
  const problems: string[] = [];
  const read = (name: string): string | undefined => {
    const value = env[name];
    return value === undefined || value.trim() === '' ? undefined : value.trim();
  };
  const integer = (name: string, fallback: number, min: number, max: number): number => {
    const raw = read(name);
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      problems.push(`${name} must be an integer between ${min} and ${max} (got "${raw}")`);
      return fallback;
    }
    return value;
  };
  const url = (name: string): string | null => {
    const raw = read(name);
    if (raw === undefined) return null;
    try {
      const parsed = new URL(raw);
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('scheme');
      return raw.replace(/\/+$/, '');
    } catch {
      problems.push(`${name} must be an http(s) URL (got "${raw}")`);
      return null;
    }
  };

  const host = read('SERVICE_HOST') ?? '127.0.0.1';
  const port = integer('SERVICE_PORT', 8000, 0, 65535);

  const provider = read('SERVICE_TTS_DEFAULT_PROVIDER') ?? 'builtin';
  if (!isTtsProviderId(provider))
    problems.push(`SERVICE_TTS_DEFAULT_PROVIDER must be a known provider id (got "${provider}")`);

  const logLevel = read('SERVICE_LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel))
    problems.push(`SERVICE_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')} (got "${logLevel}")`);
  const logFormat = read('SERVICE_LOG_FORMAT') ?? 'auto';
  if (!isLogFormat(logFormat)) problems.push(`SERVICE_LOG_FORMAT must be json, pretty or auto (got "${logFormat}")`);

  const corsOrigins = (read('SERVICE_CORS_ORIGINS') ?? '')
    .split(',')
    .map((origin) => origin.trim())
    .filter(Boolean);
  for (const origin of corsOrigins) {
    if (origin === '*') continue;
    try {
      new URL(origin);
    } catch {
      problems.push(`SERVICE_CORS_ORIGINS entries must be origins like https://example.com or * (got "${origin}")`);
    }
  }
  const allowedHosts = (read('SERVICE_ALLOWED_HOSTS') ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter(Boolean);
  for (const name of allowedHosts) {
    if (!isAllowedHostEntry(name)) {
      problems.push(
        `SERVICE_ALLOWED_HOSTS entries must be host names or IP addresses without scheme or port (app.example.com, .example.com, 10.0.0.5) or * (got "${name}")`,
      );
    }
  }

  const toolFillerText = read('SERVICE_TOOL_FILLER_TEXT') ?? null;
  if (toolFillerText !== null && toolFillerText.length > MAX_FILLER_CHARS)
    problems.push(`SERVICE_TOOL_FILLER_TEXT must be at most ${MAX_FILLER_CHARS} characters`);
  const thinkingFillerText = read('SERVICE_THINKING_FILLER_TEXT') ?? null;
  if (thinkingFillerText !== null && thinkingFillerText.length > MAX_FILLER_CHARS)
    problems.push(`SERVICE_THINKING_FILLER_TEXT must be at most ${MAX_FILLER_CHARS} characters`);
  // Said where the user waits for an answer: text that speaks no word ("...") would only hold the answer back.
  if (thinkingFillerText !== null && !/[\p{L}\p{N}]/u.test(thinkingFillerText))
    problems.push('SERVICE_THINKING_FILLER_TEXT must contain a word (a letter or digit)');

  let iceServers: ServiceConfig['iceServers'] = [];
  const iceRaw = read('SERVICE_ICE_SERVERS');
  if (iceRaw !== undefined) {
    try {
      const parsed = JSON.parse(iceRaw);
      if (!Array.isArray(parsed) || !parsed.every((s) => s && (typeof s.urls === 'string' || Array.isArray(s.urls)))) {
        throw new Error('shape');
      }
      iceServers = parsed;
    } catch {
      problems.push('SERVICE_ICE_SERVERS must be a JSON array of {urls, username?, credential?} objects');
    }
  }

  // Off on every bind: on a loopback bind, any web page the user opens is a neighbour too (docs/security.md).
  const inspectorRaw = (read('SERVICE_INSPECTOR') ?? 'off').toLowerCase();
  if (inspectorRaw !== 'on' && inspectorRaw !== 'off')
    problems.push(`SERVICE_INSPECTOR must be on or off (got "${inspectorRaw}")`);
  const inspector = inspectorRaw === 'on';

  const onnxProvider = (read('SERVICE_ONNX_PROVIDER') ?? 'cpu').toLowerCase();
  if (onnxProvider !== 'cpu' && onnxProvider !== 'cuda')
    problems.push(`SERVICE_ONNX_PROVIDER must be cpu or cuda (got "${onnxProvider}")`);
  const lipsyncBModel = read('SERVICE_LIPSYNC_B_MODEL');

  const publicBaseUrl = url('SERVICE_PUBLIC_BASE_URL') ?? `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  const dataDir = path.resolve(cwd, read('SERVICE_DATA_DIR') ?? './data');

  // One endpoint per remote TTS provider. cloud_b lives on cloud_a's platform (one account), so its key and
  // base URL default to cloud_a's.
  const ttsProviders: TtsProvidersConfig['providers'] = {};
  for (const id of TTS_PROVIDER_IDS) {
    if (id === 'builtin') continue;
    const endpoint: TtsEndpointConfig = {};
    const baseUrl = url(envVarName(id, 'BASE_URL'));
    const apiKey = read(envVarName(id, 'API_KEY'));
    if (baseUrl) endpoint.baseUrl = baseUrl;
    if (apiKey) endpoint.apiKey = apiKey;
    ttsProviders[id] = endpoint;
  }
  const cloudA = ttsProviders.cloud_a!;
  const cloudB = ttsProviders.cloud_b!;
  if (!cloudB.apiKey && cloudA.apiKey) cloudB.apiKey = cloudA.apiKey;
  if (!cloudB.baseUrl && cloudA.baseUrl) cloudB.baseUrl = cloudA.baseUrl;

  const config: ServiceConfig = {
    host,
    port,
    dataDir,
    avatarsDir: path.resolve(cwd, read('SERVICE_AVATARS_DIR') ?? './avatars'),
    corsOrigins,
    allowedHosts,
    publicBaseUrl,
    ttsDefaultProvider: (isTtsProviderId(provider) ? provider : 'builtin') as TtsProviderId,
    ttsDefaultVoice: read('SERVICE_TTS_DEFAULT_VOICE') ?? null,
    tts: {
      providers: ttsProviders,
      voiceDir: path.resolve(cwd, read('SERVICE_TTS_VOICE_DIR') ?? path.join(dataDir, 'voices')),
      publicBaseUrl,
    },
    llmSystemPrompt: read('SERVICE_LLM_SYSTEM_PROMPT') ?? DEFAULT_SYSTEM_PROMPT,
    llm: {
      baseUrl: url('SERVICE_LLM_BASE_URL'),
      apiKey: read('SERVICE_LLM_API_KEY') ?? null,
      model: read('SERVICE_LLM_MODEL') ?? 'llama3.2',
    },
    toolFillerText,
    thinkingFillerText,
    asr: {
      baseUrl: url('SERVICE_ASR_BASE_URL'),
      apiKey: read('SERVICE_ASR_API_KEY') ?? null,
      model: read('SERVICE_ASR_MODEL') ?? 'whisper-1',
    },
    maxSessions: integer('SERVICE_MAX_SESSIONS', 8, 1, 10_000),
    maxConnections: integer('SERVICE_MAX_CONNECTIONS', defaultMaxConnections(openFilesLimit()), 1, 1_000_000),
    maxPendingSessions: integer('SERVICE_MAX_PENDING_SESSIONS', 16, 1, 10_000),
    startTimeoutMs: integer('SERVICE_START_TIMEOUT_MS', 600_000, 1_000, 24 * 3600 * 1000),
    orphanTimeoutMs: integer('SERVICE_ORPHAN_TIMEOUT_S', 60, 0, 24 * 3600) * 1000,
    logLevel,
    logFormat: isLogFormat(logFormat) ? logFormat : 'auto',
    sampleRate: integer('SERVICE_SAMPLE_RATE', 16000, 8000, 48000),
    iceServers,
    tombstoneRetentionMs: integer('SERVICE_SESSION_TOMBSTONE_MS', 24 * 3600 * 1000, 0, 365 * 24 * 3600 * 1000),
    renderThreads: integer('SERVICE_RENDER_THREADS', 0, 0, 64),
    videoDelayMs: integer('SERVICE_VIDEO_DELAY_MS', DEFAULT_VIDEO_DELAY_MS, 0, 1000),
    rtmpVideoBitrateKbps: integer('SERVICE_RTMP_VIDEO_BITRATE_KBPS', 1500, 100, 20_000),
    ttsPreviewMaxChars: integer('SERVICE_TTS_PREVIEW_MAX_CHARS', 1000, 1, 1000),
    inspector,
    vadSilenceMs: integer('SERVICE_VAD_SILENCE_MS', DEFAULT_MIN_SILENCE_MS, 100, 5_000),
    vadMinSpeechMs: integer('SERVICE_VAD_MIN_SPEECH_MS', DEFAULT_MIN_SPEECH_MS, 64, 2_000),
    lipsync: {
      bModel: lipsyncBModel === undefined ? null : path.resolve(cwd, lipsyncBModel),
      cUrl: url('SERVICE_LIPSYNC_C_URL'),
      cModel: read('SERVICE_LIPSYNC_C_MODEL') ?? 'wav2lip',
      onnxProvider: onnxProvider === 'cuda' ? 'cuda' : 'cpu',
    },
    cluster: clusterConfig(read, integer, url, problems, host, port),
    webhooks: webhookConfig(read, url, problems),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** The webhook variables: a receiver needs a secret (unsigned events would be worthless to verify). */
function webhookConfig(
  read: (name: string) => string | undefined,
  url: (name: string) => string | null,
  problems: string[],
): WebhookConfig {
  const secret = read('SERVICE_WEBHOOK_SECRET') ?? null;
  // The secret itself never goes into a message.
  if (secret !== null && !isWebhookSecret(secret))
    problems.push('SERVICE_WEBHOOK_SECRET must be whsec_ followed by a base64 key of at least 16 bytes');
  const allowedHosts = (read('SERVICE_WEBHOOK_ALLOWED_HOSTS') ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter(Boolean);
  for (const name of allowedHosts) {
    if (name === '*' || !isAllowedHostEntry(name)) {
      problems.push(
        `SERVICE_WEBHOOK_ALLOWED_HOSTS entries must be host names or IP addresses without scheme or port (hooks.example.com, .example.com, 10.0.0.5) (got "${name}")`,
      );
    }
  }
  const webhookUrl = url('SERVICE_WEBHOOK_URL');
  if ((webhookUrl !== null || allowedHosts.length > 0) && secret === null) {
    problems.push(
      'SERVICE_WEBHOOK_SECRET is required when SERVICE_WEBHOOK_URL or SERVICE_WEBHOOK_ALLOWED_HOSTS is set (every callback is signed)',
    );
  }
  return { url: webhookUrl, secret, allowedHosts };
}

/** `SERVICE_REDIS_URL` switches cluster mode on; without it the other cluster variables are not read. */
function clusterConfig(
  read: (name: string) => string | undefined,
  integer: (name: string, fallback: number, min: number, max: number) => number,
  url: (name: string) => string | null,
  problems: string[],
  host: string,
  port: number,
): ClusterConfig | null {
  const redisUrl = read('SERVICE_REDIS_URL');
  if (redisUrl === undefined) return null;
  let valid = false;
  try {
    const protocol = new URL(redisUrl).protocol;
    valid = protocol === 'redis:' || protocol === 'rediss:';
  } catch {
    valid = false;
  }
  // The URL may carry a password: never echoed.
  if (!valid) problems.push('SERVICE_REDIS_URL must be a redis:// or rediss:// URL');
  const nodeUrl = url('SERVICE_NODE_URL') ?? `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  const nodeTtlMs = integer('SERVICE_NODE_TTL_S', 10, 2, 300) * 1000;
  // 4096 slots: three hex digits of a session id (src/cluster/slots.ts).
  const nodeSlot = read('SERVICE_NODE_SLOT') === undefined ? null : integer('SERVICE_NODE_SLOT', 0, 0, 4095);
  const secret = read('SERVICE_CLUSTER_SECRET') ?? null;
  // Never echoed: it is a secret.
  if (secret !== null && secret.length < 16) problems.push('SERVICE_CLUSTER_SECRET must be at least 16 characters');
  return valid ? { redisUrl, nodeUrl, nodeTtlMs, nodeSlot, secret } : null;
}

/**
 * The share of the process's open-files limit client connections may take by default. The rest is headroom for
 * what the service opens itself: LevelDB's tables, uploads and recordings, ffmpeg's pipes, worker threads, the
 * WebRTC peers' UDP sockets. A service at the cap still opens a file, so an upload never fails with EMFILE.
 */
export const CONNECTIONS_SHARE_OF_OPEN_FILES = 0.5;
/** Assumed when the limit cannot be read (no /proc): the usual soft default of `ulimit -n`. */
export const ASSUMED_OPEN_FILES_LIMIT = 1024;
/** Where Linux states this process's limits, `ulimit -n` among them ("Max open files  <soft>  <hard>  files"). */
const PROC_LIMITS = '/proc/self/limits';

/** The soft open-files limit (`ulimit -n`), or `ASSUMED_OPEN_FILES_LIMIT` where it cannot be read or is unlimited. */
export function openFilesLimit(limitsText?: string): number {
  let text = limitsText;
  if (text === undefined) {
    try {
      text = fs.readFileSync(PROC_LIMITS, 'utf8');
    } catch {
      return ASSUMED_OPEN_FILES_LIMIT;
    }
  }
  const soft = /^Max open files\s+(\d+)/mu.exec(text)?.[1];
  return soft === undefined ? ASSUMED_OPEN_FILES_LIMIT : Number(soft);
}

/** SERVICE_MAX_CONNECTIONS's default for an open-files limit: `CONNECTIONS_SHARE_OF_OPEN_FILES` of it, at least 1. */
export function defaultMaxConnections(openFiles: number): number {
  return Math.max(1, Math.floor(openFiles * CONNECTIONS_SHARE_OF_OPEN_FILES));
}

function isLogFormat(value: string): value is ServiceConfig['logFormat'] {
  return value === 'json' || value === 'pretty' || value === 'auto';
}

/** A host name (labels of letters, digits, `-`, `_`), optionally with a leading `.` for its subdomains, an IP address, or `*`. */
function isAllowedHostEntry(name: string): boolean {
  if (name === '*') return true;
  if (net.isIP(name.replace(/^\[(.*)\]$/u, '$1')) !== 0) return true;
  return /^\.?(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/u.test(
    name,
  );
}
