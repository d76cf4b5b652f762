import type { Store } from './db.ts';

/** Service-wide persona defaults for new sessions, set by the session-less customize endpoints. */
export interface PersonaDefaults {
  systemPrompt?: string;
  ttsProvider?: string;
  ttsVoice?: string | null;
  ttsModel?: string | null;
  /** Token of a stored reference audio for clone-capable providers. */
  referenceAudio?: string | null;
}

const KEY = 'persona';

export class DefaultsStore {
  private readonly db;
  private cached: PersonaDefaults | null = null;

  constructor(store: Store) {
    this.db = store.sublevel<PersonaDefaults>('defaults');
  }

  async get(): Promise<PersonaDefaults> {
    this.cached ??= (await this.db.get(KEY)) ?? {};
    return this.cached;
  }

  async update(patch: PersonaDefaults): Promise<PersonaDefaults> {
    const next = { ...(await this.get()), ...patch };
    await this.db.put(KEY, next);
    this.cached = next;
    return next;
  }
}
