/**
 * Running a WASM command-line program (a WASI `_start`) more than once in the same instance. Such a program
 * assumes it starts from the state instantiation left: its linear memory (data segments, zeroed heap) and
 * its mutable globals (the C stack pointer). Putting both back gives the next run exactly the state a fresh
 * instance would have, for a memory copy instead of allocating, filling and later collecting a new instance.
 * A module keeps its mutable globals private, so `exportMutableGlobals` adds exports for them to the module's
 * bytes before it is compiled; nothing else in the module changes.
 */

const WASM_HEADER_BYTES = 8;
const EXPORT_SECTION = 7;
const IMPORT_SECTION = 2;
const GLOBAL_SECTION = 6;
const EXTERNAL_KIND_GLOBAL = 0x03;
const INIT_END = 0x0b;
/** Globals the module's bytes export under these names, numbered by their global index. */
const GLOBAL_EXPORT_PREFIX = 'snapshot_global_';

interface Section {
  id: number;
  start: number;
  body: number;
  end: number;
}

function readUnsigned(bytes: Uint8Array, position: number): [value: number, next: number] {
  let value = 0;
  let shift = 0;
  let byte: number;
  do {
    byte = bytes[position++]!;
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [value, position];
}

function writeUnsigned(value: number): number[] {
  const out: number[] = [];
  do {
    let byte = value % 128;
    value = Math.floor(value / 128);
    if (value > 0) byte |= 0x80;
    out.push(byte);
  } while (value > 0);
  return out;
}

function sectionsOf(bytes: Uint8Array): Section[] {
  const sections: Section[] = [];
  let position = WASM_HEADER_BYTES;
  while (position < bytes.length) {
    const [size, body] = readUnsigned(bytes, position + 1);
    sections.push({ id: bytes[position]!, start: position, body, end: body + size });
    position = body + size;
  }
  return sections;
}

function skipName(bytes: Uint8Array, position: number): number {
  const [length, next] = readUnsigned(bytes, position);
  return next + length;
}

function skipLimits(bytes: Uint8Array, position: number): number {
  const hasMaximum = (bytes[position]! & 1) === 1;
  const afterMinimum = readUnsigned(bytes, position + 1)[1];
  return hasMaximum ? readUnsigned(bytes, afterMinimum)[1] : afterMinimum;
}

/** Imported globals come first in the global index space. */
function importedGlobalCount(bytes: Uint8Array, section: Section | undefined): number {
  if (!section) return 0;
  let [count, position] = readUnsigned(bytes, section.body);
  let globals = 0;
  for (; count > 0; count--) {
    position = skipName(bytes, skipName(bytes, position));
    const kind = bytes[position++];
    if (kind === EXTERNAL_KIND_GLOBAL) {
      globals++;
      position += 2; // value type, mutability
    } else if (kind === 0x00) {
      position = readUnsigned(bytes, position)[1]; // function: its type index
    } else if (kind === 0x01 || kind === 0x02) {
      position = skipLimits(bytes, kind === 0x01 ? position + 1 : position); // table (after its element type), memory
    } else {
      throw new Error('unsupported import kind in a reusable WASM module');
    }
  }
  return globals;
}

/** Indices of the module's own mutable globals. Init expressions are one constant or global.get, then `end`. */
function mutableGlobalIndices(bytes: Uint8Array, section: Section | undefined, firstIndex: number): number[] {
  if (!section) return [];
  let [count, position] = readUnsigned(bytes, section.body);
  const mutable: number[] = [];
  for (let index = firstIndex; count > 0; count--, index++) {
    if (bytes[position + 1] === 1) mutable.push(index);
    position += 2;
    while (bytes[position] !== INIT_END) {
      const opcode = bytes[position++];
      if (opcode === 0x43) position += 4;
      else if (opcode === 0x44) position += 8;
      else if (opcode === 0x41 || opcode === 0x42 || opcode === 0x23) position = readUnsigned(bytes, position)[1];
      else throw new Error('unsupported global initialiser in a reusable WASM module');
    }
    position++;
  }
  return mutable;
}

/** The module's bytes with each of its mutable globals also exported (as `snapshot_global_<index>`). */
export function exportMutableGlobals(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const sections = sectionsOf(bytes);
  const exports = sections.find((section) => section.id === EXPORT_SECTION);
  if (!exports) throw new Error('a reusable WASM module must export its memory');
  const globals = mutableGlobalIndices(
    bytes,
    sections.find((section) => section.id === GLOBAL_SECTION),
    importedGlobalCount(
      bytes,
      sections.find((section) => section.id === IMPORT_SECTION),
    ),
  );
  const [count, entries] = readUnsigned(bytes, exports.body);
  const added = globals.flatMap((index) => {
    const name = Buffer.from(`${GLOBAL_EXPORT_PREFIX}${index}`, 'utf8');
    return [...writeUnsigned(name.length), ...name, EXTERNAL_KIND_GLOBAL, ...writeUnsigned(index)];
  });
  const body = Buffer.concat([
    Buffer.from(writeUnsigned(count + globals.length)),
    bytes.subarray(entries, exports.end),
    Buffer.from(added),
  ]);
  const header = [EXPORT_SECTION, ...writeUnsigned(body.length)];
  const patched = new Uint8Array(exports.start + header.length + body.length + (bytes.length - exports.end));
  patched.set(bytes.subarray(0, exports.start));
  patched.set(header, exports.start);
  patched.set(body, exports.start + header.length);
  patched.set(bytes.subarray(exports.end), exports.start + header.length + body.length);
  return patched;
}

/**
 * An instance's state as instantiation left it, put back before each run. The copy costs ~2 ms for flite's
 * 17 MB against 15–40 ms to instantiate (and the garbage collection of the instance it replaces).
 */
export class WasmSnapshot {
  private readonly memoryBytes: Uint8Array;
  private readonly globals: { global: WebAssembly.Global; value: unknown }[];

  constructor(private readonly instance: WebAssembly.Instance) {
    this.memoryBytes = new Uint8Array(this.memory.buffer).slice();
    this.globals = Object.entries(instance.exports)
      .filter(([name]) => name.startsWith(GLOBAL_EXPORT_PREFIX))
      .map(([, global]) => ({ global: global as WebAssembly.Global, value: (global as WebAssembly.Global).value }));
  }

  private get memory(): WebAssembly.Memory {
    return this.instance.exports.memory as WebAssembly.Memory;
  }

  /** Bytes of linear memory now; memory grown by a run stays (WASM memory never shrinks). */
  get currentMemoryBytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** Memory as instantiated; pages grown since are zeroed, as fresh pages are. */
  restore(): void {
    const memory = new Uint8Array(this.memory.buffer);
    memory.set(this.memoryBytes);
    memory.fill(0, this.memoryBytes.length);
    for (const { global, value } of this.globals) global.value = value;
  }
}
