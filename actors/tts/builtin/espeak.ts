/**
 * eSpeak-NG (Emscripten build from `@echogarden/espeak-ng-emscripten`) for non-English voices.
 * One engine instance per process (loading the 24 MB data file is slow). Synthesis is synchronous and
 * the engine holds one current voice, so calls must not interleave — they cannot, being synchronous.
 * Phoneme events carry `audio_position` in ms, which become the phone timings.
 */
import type { PhoneTiming } from '../types.ts';
import { normalisePhones, type EngineAudio } from './engine.ts';
import { ipaToArpabet } from './ipa.ts';

interface EspeakEvent {
  type: string;
  audio_position: number;
  id?: string | number;
}

interface EspeakWorker {
  set_voice(voice: string): number;
  synthesize(text: string, onAudio: (samples: Int16Array, events: EspeakEvent[]) => boolean): void;
}

/** eSpeak-NG always renders at 22.05 kHz. */
export const ESPEAK_SAMPLE_RATE = 22_050;

let engine: Promise<EspeakWorker> | undefined;

export function loadEspeak(): Promise<EspeakWorker> {
  if (!engine) {
    engine = (async () => {
      // The package ships no type declarations; the shape used here is declared below.
      const packageName = '@echogarden/espeak-ng-emscripten';
      const { default: initialise } = (await import(packageName)) as {
        default: () => Promise<{ eSpeakNGWorker: new () => EspeakWorker }>;
      };
      const module = await initialise();
      return new module.eSpeakNGWorker();
    })();
    engine.catch(() => {
      engine = undefined;
    });
  }
  return engine;
}

/** Phoneme events mark where each phoneme starts; it lasts until the next event of any kind. */
export function phonesFromEspeakEvents(events: EspeakEvent[], durationMs: number): PhoneTiming[] {
  const boundaries = events.filter((event) => event.type === 'phoneme' || event.type === 'end');
  const phones: PhoneTiming[] = [];
  boundaries.forEach((event, index) => {
    if (event.type !== 'phoneme') return;
    const endMs = boundaries[index + 1]?.audio_position ?? durationMs;
    const phone = ipaToArpabet(String(event.id ?? ''));
    const previous = phones[phones.length - 1];
    if (phone === null) {
      if (previous) previous.endMs = endMs;
      return;
    }
    phones.push({ phone, startMs: event.audio_position, endMs });
  });
  return phones;
}

function escapeMarkup(text: string): string {
  // The binding's synth call parses SSML-like markup; plain text must not be taken for tags.
  return text.replace(/&/gu, '&amp;').replace(/</gu, '&lt;').replace(/>/gu, '&gt;');
}

export async function synthesizeWithEspeak(voice: string, text: string): Promise<EngineAudio> {
  const worker = await loadEspeak();
  worker.set_voice(voice);
  const pieces: Int16Array[] = [];
  const events: EspeakEvent[] = [];
  worker.synthesize(escapeMarkup(text), (samples, chunkEvents) => {
    if (samples.length > 0) pieces.push(samples);
    events.push(...chunkEvents);
    return false; // false = keep going
  });
  const pcm = new Int16Array(pieces.reduce((total, piece) => total + piece.length, 0));
  let offset = 0;
  for (const piece of pieces) {
    pcm.set(piece, offset);
    offset += piece.length;
  }
  const durationMs = (pcm.length / ESPEAK_SAMPLE_RATE) * 1000;
  return {
    pcm,
    sampleRate: ESPEAK_SAMPLE_RATE,
    phones: normalisePhones(phonesFromEspeakEvents(events, durationMs), durationMs),
  };
}
