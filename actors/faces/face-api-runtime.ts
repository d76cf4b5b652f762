import Module, { createRequire } from 'node:module';
import path from 'node:path';
import { installChainedOps } from './chained-ops.ts';

const require = createRequire(import.meta.url);

/** The subset of face-api we use; its own typings drag in DOM types, so we keep a narrow local view. */
export interface FaceApi {
  tf: any;
  nets: {
    ssdMobilenetv1: { loadFromDisk(dir: string): Promise<void> };
    faceLandmark68Net: { loadFromDisk(dir: string): Promise<void> };
  };
  SsdMobilenetv1Options: new (opts: { minConfidence: number; maxResults: number }) => unknown;
  detectAllFaces(input: unknown, options: unknown): { withFaceLandmarks(): Promise<FaceApiResult[]> };
  /** The 68-landmark net alone on an image that is already a face crop; positions in the crop's pixels. */
  detectFaceLandmarks(input: unknown): Promise<{ positions: Array<{ x: number; y: number }> }>;
}

export interface FaceApiResult {
  detection: { score: number; box: { x: number; y: number; width: number; height: number } };
  landmarks: { positions: Array<{ x: number; y: number }> };
}

let loading: Promise<FaceApi> | null = null;

/**
 * Loads face-api on the tfjs WebAssembly backend, fully offline: weights come from the face-api package's
 * `model/` folder and the `.wasm` binaries from `@tensorflow/tfjs-backend-wasm/dist/`, both on disk.
 *
 * face-api's Node WASM build (`dist/face-api.node-wasm.js`) requires `@tensorflow/tfjs`, which is not
 * installed; it only needs tfjs-core ops and `tf.io`, so that one request is redirected to the installed
 * `@tensorflow/tfjs-core` (same 4.22.0 version face-api was built against) and the chained tensor methods
 * the full package would register are installed by hand. Call only inside a worker thread: the redirect
 * patches this thread's CommonJS resolver.
 */
export function loadFaceApi(): Promise<FaceApi> {
  loading ??= load().catch((error) => {
    loading = null;
    throw error;
  });
  return loading;
}

async function load(): Promise<FaceApi> {
  redirectTfjsToCore();
  const faceapi = require('@vladmandic/face-api/dist/face-api.node-wasm.js') as FaceApi;
  const wasm = require('@tensorflow/tfjs-backend-wasm') as { setWasmPaths(prefix: string): void };
  const tf = faceapi.tf;
  installChainedOps(tf);
  wasm.setWasmPaths(
    path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm')) + path.sep,
  );
  if (!(await tf.setBackend('wasm'))) throw new Error('tfjs wasm backend failed to initialise');
  await tf.ready();
  const modelDir = path.dirname(
    require.resolve('@vladmandic/face-api/model/ssd_mobilenetv1_model-weights_manifest.json'),
  );
  await faceapi.nets.ssdMobilenetv1.loadFromDisk(modelDir);
  await faceapi.nets.faceLandmark68Net.loadFromDisk(modelDir);
  return faceapi;
}

function redirectTfjsToCore(): void {
  const resolver = Module as unknown as {
    _resolveFilename: (request: string, ...rest: unknown[]) => string;
    __tfjsRedirected?: boolean;
  };
  if (resolver.__tfjsRedirected) return;
  const coreEntry = require.resolve('@tensorflow/tfjs-core');
  const original = resolver._resolveFilename;
  resolver._resolveFilename = function (request: string, ...rest: unknown[]) {
    if (request === '@tensorflow/tfjs') return coreEntry;
    return original.call(this, request, ...rest);
  };
  resolver.__tfjsRedirected = true;
}
