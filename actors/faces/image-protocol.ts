/**
 * The IPC messages between the service and one portrait image process (`image-process.ts`). One process runs
 * one upload at a time: `decode`, then (after the service has looked for a face in the small copy) `crop`. Sent with
 * `serialization: 'advanced'`, so pixel buffers cross as typed arrays.
 */

export interface CropRect {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** Service → image process. */
export type ImageRequest =
  | { type: 'decode'; image: Uint8Array; maxPixels: number; detectionMaxSide: number }
  | { type: 'crop'; crop: CropRect; target: { width: number; height: number } };

/** Image process → service: `ready` once, then exactly one answer per request. `invalid` is the upload's fault (→ 400). */
export type ImageReply =
  | { type: 'ready' }
  | { type: 'decoded'; width: number; height: number; detection: { rgba: Uint8Array; width: number; height: number } }
  | { type: 'cropped'; png: Uint8Array }
  | { type: 'invalid'; message: string }
  | { type: 'failed'; message: string };
