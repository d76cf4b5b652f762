/**
 * Plain tensors that cross the worker boundary (typed array + dims, structured-cloneable), and the two
 * operations the micro-batcher needs: stack items along a model's batch axis, and split a batch result
 * back into one tensor per item. The batch axis is not always 0 (Silero's `state` is [2, N, 128]).
 */

export type TensorType = 'float32' | 'int32' | 'int64' | 'uint8';

export type TensorArray = Float32Array | Int32Array | BigInt64Array | Uint8Array;

export interface TensorData {
  type: TensorType;
  data: TensorArray;
  dims: readonly number[];
}

/** One item's or one batch's named tensors. */
export type TensorMap = Record<string, TensorData>;

function elementCount(dims: readonly number[]): number {
  return dims.reduce((count, size) => count * size, 1);
}

function allocate(type: TensorType, length: number): TensorArray {
  switch (type) {
    case 'float32':
      return new Float32Array(length);
    case 'int32':
      return new Int32Array(length);
    case 'int64':
      return new BigInt64Array(length);
    case 'uint8':
      return new Uint8Array(length);
  }
}

export function tensor(type: TensorType, data: TensorArray, dims: readonly number[]): TensorData {
  if (data.length !== elementCount(dims)) {
    throw new RangeError(
      `tensor data has ${data.length} elements, dims [${dims.join(', ')}] need ${elementCount(dims)}`,
    );
  }
  return { type, data, dims };
}

/** Elements before the batch axis (outer) and after it (inner), for row-major layout. */
function strides(dims: readonly number[], axis: number): { outer: number; inner: number } {
  if (axis < 0 || axis >= dims.length) throw new RangeError(`batch axis ${axis} outside dims [${dims.join(', ')}]`);
  return { outer: elementCount(dims.slice(0, axis)), inner: elementCount(dims.slice(axis + 1)) };
}

/** The dims with the batch axis blanked, so items that can share a batch have equal signatures. */
export function shapeSignature(value: TensorData, axis: number): string {
  return `${value.type}[${value.dims.map((size, index) => (index === axis ? 'N' : size)).join(',')}]`;
}

/** Stacks tensors of equal shape (except along `axis`) into one tensor along `axis`. */
export function concatAlongAxis(parts: readonly TensorData[], axis: number): TensorData {
  const first = parts[0];
  if (!first) throw new RangeError('nothing to concatenate');
  const { outer, inner } = strides(first.dims, axis);
  const total = parts.reduce((sum, part) => sum + part.dims[axis], 0);
  const dims = first.dims.map((size, index) => (index === axis ? total : size));
  const out = allocate(first.type, elementCount(dims));
  const outRow = total * inner;
  let offset = 0;
  for (const part of parts) {
    const partRow = part.dims[axis] * inner;
    for (let o = 0; o < outer; o++) {
      // Same element type by construction (shapeSignature grouped them); the cast only satisfies TS.
      (out as Float32Array).set(
        part.data.subarray(o * partRow, (o + 1) * partRow) as Float32Array,
        o * outRow + offset,
      );
    }
    offset += partRow;
  }
  return { type: first.type, data: out, dims };
}

/** Cuts a tensor along `axis` into pieces of the given sizes (their sum must be the axis length). */
export function splitAlongAxis(whole: TensorData, axis: number, sizes: readonly number[]): TensorData[] {
  const { outer, inner } = strides(whole.dims, axis);
  const total = whole.dims[axis];
  if (sizes.reduce((sum, size) => sum + size, 0) !== total) {
    throw new RangeError(`batch of ${total} cannot be split into [${sizes.join(', ')}]`);
  }
  const wholeRow = total * inner;
  let offset = 0;
  return sizes.map((size) => {
    const dims = whole.dims.map((length, index) => (index === axis ? size : length));
    const out = allocate(whole.type, elementCount(dims));
    const partRow = size * inner;
    for (let o = 0; o < outer; o++) {
      (out as Float32Array).set(
        whole.data.subarray(o * wholeRow + offset, o * wholeRow + offset + partRow) as Float32Array,
        o * partRow,
      );
    }
    offset += partRow;
    return { type: whole.type, data: out, dims };
  });
}
