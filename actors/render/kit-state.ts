/**
 * A prepared CPU renderer's state as bytes, and back (issue 47's render kit). The browser draws a client-rendered
 * session with the very renderer classes the server renders with (`renderers/*.ts`): the server prepares one,
 * `packState` walks its fields (typed arrays, maps, the class instances named in `KIT_CLASSES`), and the browser's
 * `unpackState` rebuilds the same objects on the same prototypes, so `render(FrameRequest) → I420` runs the same
 * code on the same cached pieces. Nothing here knows a renderer's fields: whatever a renderer keeps travels, except
 * functions and the fields `BUILD_ONLY_FIELDS` names (what only building pieces needs, never `render`).
 *
 * Layout: u32 (little-endian) length of a JSON document, the document, then the binary section its typed arrays
 * point into (each 8-byte aligned). Pure: no Node module, so it runs in the browser too.
 */
import { WarpRenderer } from './renderers/warp.ts';
import { RtRenderer } from './renderers/rt.ts';
import { RtHeadRenderer } from './renderers/rt_head.ts';
import { MockRenderer } from './renderers/mock.ts';
import { PhotoHead } from './photo-head.ts';
import { ClipHead } from './clip-head.ts';
import { HarvestedMouths } from './harvested-mouths.ts';

/** The classes a prepared renderer's state may hold, by a name that survives minification. */
export const KIT_CLASSES: Readonly<Record<string, { prototype: object }>> = {
  WarpRenderer,
  RtRenderer,
  RtHeadRenderer,
  MockRenderer,
  PhotoHead,
  ClipHead,
  HarvestedMouths,
};

/**
 * Fields only building pieces reads (a photo's RGBA rest image and its jaw's warp freedom: every mouth and eyelid patch is
 * built before packing), left out of the kit; `render` never touches them.
 */
const BUILD_ONLY_FIELDS: Readonly<Record<string, readonly string[]>> = {
  WarpRenderer: ['source', 'jaw'],
};

const TYPED = {
  u8: Uint8Array,
  u8c: Uint8ClampedArray,
  i8: Int8Array,
  u16: Uint16Array,
  i16: Int16Array,
  u32: Uint32Array,
  i32: Int32Array,
  f32: Float32Array,
  f64: Float64Array,
} as const;
type TypedName = keyof typeof TYPED;
type Typed = InstanceType<(typeof TYPED)[TypedName]>;

/** A value the packer leaves to its caller (a clip's loop frames, sent as video): the caller's placeholder instead. */
export type Replacements = Map<object, unknown>;

function typedName(value: ArrayBufferView): TypedName | null {
  for (const [name, type] of Object.entries(TYPED)) if (value instanceof type) return name as TypedName;
  return null;
}

function className(value: object): string | null {
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto === Object.prototype || proto === null) return null;
  for (const [name, type] of Object.entries(KIT_CLASSES)) if (proto === type.prototype) return name;
  throw new Error(`render kit: cannot pack an instance of ${value.constructor?.name ?? 'an unknown class'}`);
}

class Packer {
  private readonly chunks: Uint8Array[] = [];
  private length = 0;

  constructor(private readonly replacements: Replacements) {}

  bytes(view: ArrayBufferView): number {
    const pad = (8 - (this.length % 8)) % 8;
    if (pad) this.chunks.push(new Uint8Array(pad));
    const offset = this.length + pad;
    // A copy: the renderer's arrays may live in shared memory, which the kit never shares.
    this.chunks.push(new Uint8Array(view.buffer, view.byteOffset, view.byteLength).slice());
    this.length = offset + view.byteLength;
    return offset;
  }

  value(value: unknown): unknown {
    if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
    if (typeof value === 'number') return Number.isFinite(value) ? value : { $num: String(value) };
    if (typeof value !== 'object') return undefined; // functions, undefined: left out
    if (this.replacements.has(value)) return this.value(this.replacements.get(value));
    if (ArrayBuffer.isView(value)) {
      const type = typedName(value);
      if (!type) throw new Error('render kit: cannot pack a DataView');
      return { $typed: type, offset: this.bytes(value), length: (value as Typed).length };
    }
    if (Array.isArray(value)) return value.map((item) => this.value(item) ?? null);
    if (value instanceof Map) return { $map: [...value].map(([k, v]) => [this.value(k), this.value(v)]) };
    if (value instanceof Set) return { $set: [...value].map((item) => this.value(item)) };
    const name = className(value);
    const skipped = name ? (BUILD_ONLY_FIELDS[name] ?? []) : [];
    const fields: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(value)) {
      if (skipped.includes(key)) continue;
      const packed = this.value(field);
      if (packed !== undefined) fields[key] = packed;
    }
    return name ? { $class: name, fields } : fields;
  }

  binary(): Uint8Array {
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const chunk of this.chunks) {
      out.set(chunk, at);
      at += chunk.length;
    }
    return out;
  }
}

/** `root` (and everything it holds) as bytes; values in `replacements` are written as the placeholder given. */
export function packState(root: unknown, replacements: Replacements = new Map()): Uint8Array {
  const packer = new Packer(replacements);
  const json = new TextEncoder().encode(JSON.stringify(packer.value(root)));
  const binary = packer.binary();
  // The binary section starts 8-byte aligned, so every typed array can be a view of the kit's bytes.
  const head = 4 + json.length;
  const start = head + ((8 - (head % 8)) % 8);
  const out = new Uint8Array(start + binary.length);
  new DataView(out.buffer).setUint32(0, json.length, true);
  out.set(json, 4);
  out.set(binary, start);
  return out;
}

/**
 * The state `packState` wrote, rebuilt on the registered prototypes; `revive` turns the caller's placeholders back
 * into values (called for every plain object first: return undefined to leave it as it is). Typed arrays are
 * views of `bytes`, copied nothing.
 */
export function unpackState(
  bytes: Uint8Array,
  revive: (value: Record<string, unknown>, read: (packed: unknown) => unknown) => unknown = () => undefined,
) {
  const jsonLength = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0, true);
  const json = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + jsonLength))) as unknown;
  const head = 4 + jsonLength;
  const start = bytes.byteOffset + head + ((8 - (head % 8)) % 8);
  const read = (value: unknown): unknown => {
    if (value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) return value.map(read);
    const packed = value as Record<string, unknown>;
    const revived = revive(packed, read);
    if (revived !== undefined) return revived;
    if (typeof packed.$num === 'string') return Number(packed.$num);
    if (typeof packed.$typed === 'string') {
      const type = TYPED[packed.$typed as TypedName];
      if (!type) throw new Error('render kit: unknown array type');
      return new type(bytes.buffer as ArrayBuffer, start + (packed.offset as number), packed.length as number);
    }
    if (Array.isArray(packed.$map)) return new Map((packed.$map as unknown[][]).map(([k, v]) => [read(k), read(v)]));
    if (Array.isArray(packed.$set)) return new Set((packed.$set as unknown[]).map(read));
    if (typeof packed.$class === 'string') {
      const type = KIT_CLASSES[packed.$class];
      if (!type) throw new Error('render kit: unknown class');
      return Object.assign(Object.create(type.prototype) as object, read(packed.fields));
    }
    const out: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(packed)) out[key] = read(field);
    return out;
  };
  return read(json);
}
