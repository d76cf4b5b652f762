/**
 * Face descriptors for the fidelity bench (`avatar-fidelity.ts`): face-api's recognition net (128 numbers per face;
 * two photos of one person are usually within 0.6, face-api's own match threshold) on frames a viewer received.
 * Bench-only: the service never recognises faces. The net runs in a worker thread of its own, since face-api's
 * loader patches its thread's module resolver (`face-api-runtime.ts`).
 */
import path from 'node:path';
import { createRequire } from 'node:module';
import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import { loadFaceApi } from '../actors/faces/face-api-runtime.ts';

interface DescriptorRequest {
  id: number;
  rgba: Uint8Array;
  width: number;
  height: number;
}

/** Euclidean distance between two descriptors. */
export function descriptorDistance(a: number[], b: number[]): number {
  return Math.sqrt(a.reduce((sum, v, i) => sum + (v - b[i]) ** 2, 0));
}

/** The mean of several descriptors of one face (face-api's usual reference for a person). */
export function meanDescriptor(descriptors: number[][]): number[] {
  return descriptors[0].map((_, i) => descriptors.reduce((sum, d) => sum + d[i], 0) / descriptors.length);
}

/** A worker computing the descriptor of the one face on an RGBA frame (null when no face is found). */
export class FaceDescriptors {
  private readonly worker: Worker;
  private next = 0;
  private readonly waiting = new Map<number, (descriptor: number[] | null) => void>();

  constructor() {
    const bootstrap = `(async () => { const { register } = await import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}); register(); await import(${JSON.stringify(import.meta.url)}); })();`;
    this.worker = new Worker(bootstrap, { eval: true });
    this.worker.on('message', ({ id, descriptor }: { id: number; descriptor: number[] | null }) => {
      this.waiting.get(id)?.(descriptor);
      this.waiting.delete(id);
    });
  }

  of(rgba: Uint8Array, width: number, height: number): Promise<number[] | null> {
    const id = this.next++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.worker.postMessage({ id, rgba, width, height } satisfies DescriptorRequest);
    });
  }

  close(): Promise<number> {
    return this.worker.terminate();
  }
}

async function serve(): Promise<void> {
  // face-api's recognition calls are outside the runtime's narrow typing.
  const faceapi = (await loadFaceApi()) as any;
  const modelDir = path.dirname(
    createRequire(import.meta.url).resolve('@vladmandic/face-api/model/face_recognition_model-weights_manifest.json'),
  );
  await faceapi.nets.faceRecognitionNet.loadFromDisk(modelDir);
  parentPort!.on('message', async ({ id, rgba, width, height }: DescriptorRequest) => {
    const rgb = new Int32Array(width * height * 3);
    for (let i = 0, o = 0; i < rgba.length; i += 4, o += 3) {
      rgb[o] = rgba[i];
      rgb[o + 1] = rgba[i + 1];
      rgb[o + 2] = rgba[i + 2];
    }
    const input = faceapi.tf.tensor3d(rgb, [height, width, 3], 'int32');
    try {
      const face = await faceapi
        .detectSingleFace(input, new faceapi.SsdMobilenetv1Options({ minConfidence: 0.3, maxResults: 1 }))
        .withFaceLandmarks()
        .withFaceDescriptor();
      parentPort!.postMessage({ id, descriptor: face ? Array.from(face.descriptor as Float32Array) : null });
    } finally {
      input.dispose();
    }
  });
}

if (!isMainThread && parentPort) await serve();
