import path from 'node:path';
import os from 'node:os';
import type { Logger } from 'pino';
import type { ServiceConfig } from './config.ts';
import { Store } from './store/db.ts';
import { SessionStore } from './store/sessions.ts';
import { AvatarCatalog } from './catalog/catalog.ts';
import { ModelRegistry } from './models.ts';
import { SessionSupervisor, type RenderOpener } from './sessions/supervisor.ts';
import { InspectionHub } from './inspect/inspection-hub.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { createTtsRegistry, type TtsRegistry } from '../actors/tts/registry.ts';
import { closeBuiltinEngines } from '../actors/tts/providers/builtin.ts';
import { createOpenAiLlm } from '../actors/llm/providers/openai.ts';
import { createOpenAiAsr } from '../actors/asr/providers/openai.ts';
import { endpointFromServiceConfig } from '../actors/llm/openai-http.ts';
import type { LlmProvider } from '../actors/llm/types.ts';
import type { AsrProvider } from '../actors/asr/types.ts';
import { DefaultsStore } from './store/defaults.ts';
import { VoiceCatalog } from './voices/catalog.ts';
import { VoiceUploads } from './voices/uploads.ts';
import { catalogVoiceLookup } from './voices/clone.ts';
import { JobStore } from './store/jobs.ts';
import { RecordingRegistry } from './recording/registry.ts';
import { OfflineJobQueue } from './recording/offline-jobs.ts';
import { sweepStartupLeftovers } from './store/startup-sweep.ts';

export interface Services {
  config: ServiceConfig;
  logger: Logger;
  store: Store;
  sessionStore: SessionStore;
  defaults: DefaultsStore;
  catalog: AvatarCatalog;
  models: ModelRegistry;
  renderPool: RenderPool;
  tts: TtsRegistry;
  voices: VoiceCatalog;
  uploads: VoiceUploads;
  /** Where reference audio of locally cloned voices lives. */
  voiceDir: string;
  llm: LlmProvider;
  asr: AsrProvider;
  supervisor: SessionSupervisor;
  /** The live state inspector's feed (`/inspect`); `enabled` follows SERVICE_INSPECTOR. */
  inspection: InspectionHub;
  recordings: RecordingRegistry;
  jobs: OfflineJobQueue;
  close(): Promise<void>;
}

/** Replaceable parts, for tests that plug in loopback upstreams or a pre-built registry. */
export interface ServiceOverrides {
  tts?: TtsRegistry;
  llm?: LlmProvider;
  asr?: AsrProvider;
  /** Opens session renderers (default: the render pool); tests wrap the pool to make a renderer fail. */
  render?: RenderOpener;
}

/** Builds every long-lived service object in dependency order; `close()` tears them down in reverse. */
export async function createServices(config: ServiceConfig, logger: Logger, overrides: ServiceOverrides = {}): Promise<Services> {
  const store = await Store.open(config.dataDir);
  const sessionStore = new SessionStore(store);
  const defaults = new DefaultsStore(store);
  const catalog = new AvatarCatalog(config.avatarsDir, logger.child({ component: 'catalog' }));
  const models = new ModelRegistry();
  const renderPool = new RenderPool({
    threads: config.renderThreads || Math.max(1, os.availableParallelism() - 1),
    logger: logger.child({ component: 'render' }),
  });
  const ttsConfig = config.tts;
  const voices = new VoiceCatalog(store.sublevel('voices'));
  const uploads = new VoiceUploads({ dir: path.join(config.dataDir, 'voice-uploads') });
  const tts =
    overrides.tts ??
    createTtsRegistry(ttsConfig, { logger: logger.child({ component: 'tts' }), voiceLookup: catalogVoiceLookup(voices) });
  const llm = overrides.llm ?? createOpenAiLlm(endpointFromServiceConfig(config.llm));
  const asr = overrides.asr ?? createOpenAiAsr(endpointFromServiceConfig(config.asr));

  const inspection = new InspectionHub(config.inspector);
  const supervisor = new SessionSupervisor({
    config,
    store: sessionStore,
    catalog,
    models,
    render: overrides.render ?? renderPool,
    tts: (id) => tts.get(id),
    llm,
    asr,
    logger,
    defaults: () => defaults.get(),
    inspection,
  });
  await supervisor.recover();
  // Load the built-in speech engines now (in their engine process) so the first speak does not pay for WASM compilation.
  if (config.ttsDefaultProvider === 'builtin') tts.get('builtin');
  const recordings = new RecordingRegistry(config.dataDir, logger.child({ component: 'recording' }));
  const jobs = new OfflineJobQueue({
    dataDir: config.dataDir,
    store: new JobStore(store),
    sampleRate: config.sampleRate,
    openRenderer: async (avatarId, model) => {
      const avatar = await catalog.get(avatarId);
      if (!avatar) throw new Error(`avatar "${avatarId}" no longer exists`);
      return renderPool.open(avatar, model as never);
    },
    tts: (id) => tts.get(id as never),
    logger: logger.child({ component: 'offline' }),
  });
  // Before listening: what a crash left (temp names, files no record points to) goes; unfinished jobs fail.
  await sweepStartupLeftovers({ voices, voiceDir: ttsConfig.voiceDir, uploads, avatarsDir: config.avatarsDir, recordings, jobs }, logger.child({ component: 'sweep' }));
  // Expired clone samples are swept periodically too, so a long-running service never keeps one.
  uploads.start();

  let closed = false;
  return {
    config,
    logger,
    store,
    sessionStore,
    defaults,
    catalog,
    models,
    renderPool,
    tts,
    voices,
    uploads,
    voiceDir: ttsConfig.voiceDir,
    llm,
    asr,
    supervisor,
    inspection,
    recordings,
    jobs,
    async close() {
      if (closed) return;
      closed = true;
      await jobs.close();
      await supervisor.closeAll();
      inspection.close();
      await recordings.close();
      uploads.close();
      await renderPool.close();
      await closeBuiltinEngines();
      await store.close();
    },
  };
}
