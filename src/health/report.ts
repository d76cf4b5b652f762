/**
 * What `GET /health` reports: every dependency as `ok`, `not_configured` or `error`, with when it was
 * checked and why it is not ok. Remote dependencies (the LLM and ASR servers, TTS servers with a
 * configured base URL) are probed over the network through the `ProbeCache`; everything in-process
 * (storage, the avatar catalog, the built-in TTS engine, the render workers) is looked at on each request.
 */
import { builtinEngineProcesses } from '../../actors/tts/builtin/pool.ts';
import { envVarName } from '../../actors/tts/providers/common.ts';
import { TTS_PROVIDER_IDS, type TtsProviderId } from '../../actors/tts/types.ts';
import type { ProviderStatus } from '../../actors/upstream/errors.ts';
import type { ModelInfo } from '../models.ts';
import { errorForLog } from '../logger.ts';
import type { Services } from '../services.ts';
import { ProbeCache, type DependencyHealth, type ProbeOutcome } from './probe-cache.ts';
import { probeOpenAiModels, probeReachable } from './probes.ts';

export interface HealthReport {
  /** `degraded` when any dependency is in `error`; `not_configured` ones do not count. */
  status: 'ok' | 'degraded';
  components: Record<string, DependencyHealth>;
}

type ReportedServices = Pick<
  Services,
  'config' | 'sessionStore' | 'catalog' | 'models' | 'renderPool' | 'tts' | 'llm' | 'asr'
>;

export class HealthReporter {
  constructor(
    private readonly services: ReportedServices,
    private readonly probes = new ProbeCache(),
  ) {}

  async report(): Promise<HealthReport> {
    const { config, llm, asr } = this.services;
    const checks: Array<[string, Promise<DependencyHealth>]> = [
      ['storage', this.probes.checkFresh((signal) => this.storage(signal))],
      ['avatars', this.probes.checkFresh(() => this.avatars())],
      ['llm', this.openAi('llm', llm.status(), { ...config.llm, envPrefix: 'SERVICE_LLM' })],
      ['asr', this.openAi('asr', asr.status(), { ...config.asr, envPrefix: 'SERVICE_ASR' })],
      ...TTS_PROVIDER_IDS.map((id): [string, Promise<DependencyHealth>] => [`tts.${id}`, this.tts(id)]),
      ...this.services.models
        .list()
        .map((model): [string, Promise<DependencyHealth>] => [
          `renderer.${model.id}`,
          Promise.resolve(this.renderer(model)),
        ]),
    ];
    const components: Record<string, DependencyHealth> = {};
    for (const [name, check] of checks) components[name] = await check;
    const degraded = Object.values(components).some((component) => component.status === 'error');
    return { status: degraded ? 'degraded' : 'ok', components };
  }

  /** Stops running probes (service shutdown). */
  close(): void {
    this.probes.close();
  }

  private async storage(signal: AbortSignal): Promise<ProbeOutcome> {
    signal.throwIfAborted();
    try {
      await this.services.sessionStore.get('health-probe');
      return { status: 'ok' };
    } catch (error) {
      return { status: 'error', reason: `the database cannot be read: ${errorForLog(error)}` };
    }
  }

  private async avatars(): Promise<ProbeOutcome> {
    let count: number;
    try {
      count = (await this.services.catalog.list()).length;
    } catch (error) {
      return { status: 'error', reason: `the avatar directory cannot be read: ${errorForLog(error)}` };
    }
    if (count === 0)
      return { status: 'error', reason: 'no avatars found; add an avatar bundle to SERVICE_AVATARS_DIR' };
    return { status: 'ok', detail: `${count} avatars` };
  }

  private openAi(
    name: 'llm' | 'asr',
    status: ProviderStatus,
    target: { baseUrl: string | null; apiKey: string | null; model: string; envPrefix: 'SERVICE_LLM' | 'SERVICE_ASR' },
  ): Promise<DependencyHealth> {
    if (!status.configured)
      return Promise.resolve(
        checkedNow({ status: 'not_configured', reason: status.reason ?? `set ${target.envPrefix}_BASE_URL` }),
      );
    const baseUrl = target.baseUrl;
    // A provider plugged in by code (tests) has no endpoint of its own to ask.
    if (!baseUrl)
      return Promise.resolve(checkedNow({ status: 'ok', detail: 'in-process provider; no server to probe' }));
    return this.probes.check(name, (signal) => probeOpenAiModels({ ...target, baseUrl }, signal));
  }

  private tts(id: TtsProviderId): Promise<DependencyHealth> {
    if (id === 'builtin') return Promise.resolve(checkedNow(this.builtinTts()));
    const status = this.services.tts.get(id).status();
    if (!status.configured)
      return Promise.resolve(
        checkedNow({ status: 'not_configured', reason: status.reason ?? `set ${envVarName(id, 'API_KEY')}` }),
      );
    const baseUrl = this.services.config.tts.providers[id]?.baseUrl;
    // Without a base URL of its own the provider talks to its vendor's cloud, which /health does not call.
    if (!baseUrl)
      return Promise.resolve(checkedNow({ status: 'ok', detail: 'configured; the vendor endpoint is not probed' }));
    return this.probes.check(`tts.${id}`, (signal) => probeReachable(baseUrl, envVarName(id, 'BASE_URL'), signal));
  }

  /**
   * The built-in engine runs in a child process. It is started at start-up when it is the default
   * provider, and otherwise on first use, so "no process" is only a fault when it is the default.
   */
  private builtinTts(): ProbeOutcome {
    const processes = builtinEngineProcesses();
    const ready = processes.filter((engine) => engine.ready).length;
    if (ready > 0) return { status: 'ok', detail: `${ready} engine process${ready === 1 ? '' : 'es'} ready` };
    if (processes.length > 0) return { status: 'error', reason: 'the engine process is still starting' };
    if (this.services.config.ttsDefaultProvider === 'builtin')
      return { status: 'error', reason: 'no engine process is running; it is being restarted' };
    return { status: 'ok', detail: 'the engine process starts on first use' };
  }

  private renderer(model: ModelInfo): DependencyHealth {
    if (model.status === 'not_configured') return checkedNow({ status: 'not_configured', reason: model.reason });
    if (model.status === 'error') return checkedNow({ status: 'error', reason: model.reason });
    const workers = this.services.renderPool.workers.length;
    if (workers === 0) return checkedNow({ status: 'error', reason: 'no render worker thread is running' });
    return checkedNow({
      status: 'ok',
      detail: `${model.backend}; ${workers} render worker thread${workers === 1 ? '' : 's'}`,
    });
  }
}

function checkedNow(outcome: ProbeOutcome): DependencyHealth {
  return { ...outcome, checked_at: new Date().toISOString() };
}
