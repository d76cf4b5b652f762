import fc from 'fast-check';

/**
 * fast-check generators of hostile client input for the fuzz suite: WAV files with arbitrary headers,
 * multipart bodies (valid and broken framing), JSON (arbitrary, malformed, and shaped by an OpenAPI
 * schema with mutated fields), path segments and query strings. Everything is bytes ready to send.
 */

// ---------------------------------------------------------------- WAV

/** `arb` once in `1 + nullWeight` draws, null otherwise (null = "what a correct writer would put there"). */
function rarely<T>(arb: fc.Arbitrary<T>, nullWeight = 3): fc.Arbitrary<T | null> {
  return fc.oneof({ weight: nullWeight, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: arb });
}

const u16 = fc.nat({ max: 0xffff });
const u32 = fc.nat({ max: 0xffffffff });
const interestingU32 = fc.oneof(fc.constantFrom(0, 1, 2, 7, 255, 0x7fffffff, 0x80000000, 0xffffffff), u32);

export interface WavHeaderSpec {
  riffId: string;
  waveId: string;
  riffSize: number | null;
  fmtSize: number;
  audioFormat: number;
  channels: number;
  sampleRate: number;
  byteRate: number | null;
  blockAlign: number | null;
  bitsPerSample: number;
  extraChunks: Array<{ id: string; size: number | null; body: Uint8Array }>;
  dataFirst: boolean;
  dataSize: number | null;
  payload: Uint8Array;
  truncateAt: number | null;
}

/** PCM16 tone bytes: a valid payload, so header fields rather than noise decide what the decoder does. */
export function tonePcm16(samples: number, sampleRate = 16000, hz = 220, amplitude = 8000): Buffer {
  const out = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++)
    out.writeInt16LE(Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / sampleRate)), i * 2);
  return out;
}

const wavPayload = fc.oneof(
  fc.uint8Array({ maxLength: 4096 }),
  fc
    .record({ samples: fc.integer({ min: 0, max: 8000 }), hz: fc.integer({ min: 50, max: 4000 }) })
    .map(({ samples, hz }) => new Uint8Array(tonePcm16(samples, 16000, hz))),
);

export const wavHeaderSpec: fc.Arbitrary<WavHeaderSpec> = fc.record({
  riffId: fc.constantFrom('RIFF', 'RIFF', 'RIFF', 'RIFX', 'RF64', 'riff'),
  waveId: fc.constantFrom('WAVE', 'WAVE', 'WAVE', 'AVI ', 'wave'),
  riffSize: rarely(interestingU32),
  fmtSize: fc.constantFrom(16, 16, 18, 40, 0, 2, 14, 0xffffffff),
  audioFormat: fc.oneof(fc.constantFrom(1, 1, 3, 6, 7, 0x55, 0xfffe, 0), u16),
  channels: fc.oneof(fc.constantFrom(1, 1, 2, 0, 6, 8, 0xffff), u16),
  sampleRate: fc.oneof(
    fc.constantFrom(8000, 11025, 16000, 22050, 24000, 44100, 48000, 96000, 192000, 0, 1, 0xffffffff),
    u32,
  ),
  byteRate: rarely(interestingU32),
  blockAlign: rarely(u16),
  bitsPerSample: fc.oneof(fc.constantFrom(16, 16, 8, 24, 32, 0, 1, 4, 12, 64), u16),
  extraChunks: fc.array(
    fc.record({
      id: fc.constantFrom('LIST', 'fact', 'JUNK', 'junk', 'cue ', '\0\0\0\0'),
      size: rarely(interestingU32),
      body: fc.uint8Array({ maxLength: 33 }),
    }),
    { maxLength: 3 },
  ),
  dataFirst: fc.boolean(),
  dataSize: rarely(interestingU32, 2),
  payload: wavPayload,
  truncateAt: rarely(fc.nat({ max: 200 })),
});

function chunk(id: string, size: number | null, body: Uint8Array): Buffer {
  const header = Buffer.alloc(8);
  header.write(id.padEnd(4, ' ').slice(0, 4), 0, 'latin1');
  header.writeUInt32LE((size ?? body.length) >>> 0, 4);
  // RIFF pads odd chunks to even length; a lying size leaves the pad where it falls.
  return Buffer.concat([header, body, body.length % 2 === 1 ? Buffer.alloc(1) : Buffer.alloc(0)]);
}

/** Serialises a spec: `null` fields take the value a correct writer would put there. */
export function buildWav(spec: WavHeaderSpec): Buffer {
  const fmtBody = Buffer.alloc(Math.max(16, spec.fmtSize === 0xffffffff ? 16 : Math.min(spec.fmtSize, 40)));
  fmtBody.writeUInt16LE(spec.audioFormat, 0);
  fmtBody.writeUInt16LE(spec.channels, 2);
  fmtBody.writeUInt32LE(spec.sampleRate >>> 0, 4);
  const blockAlign = spec.blockAlign ?? ((spec.channels * spec.bitsPerSample) / 8) & 0xffff;
  fmtBody.writeUInt32LE((spec.byteRate ?? spec.sampleRate * blockAlign) >>> 0, 8);
  fmtBody.writeUInt16LE(blockAlign, 12);
  fmtBody.writeUInt16LE(spec.bitsPerSample, 14);
  const fmt = chunk(
    'fmt ',
    spec.fmtSize,
    fmtBody.subarray(0, Math.min(fmtBody.length, Math.max(spec.fmtSize, 0)) || fmtBody.length),
  );
  const data = chunk('data', spec.dataSize, spec.payload);
  const extras = spec.extraChunks.map((c) => chunk(c.id, c.size, c.body));
  const body = Buffer.concat(spec.dataFirst ? [data, ...extras, fmt] : [fmt, ...extras, data]);
  const head = Buffer.alloc(12);
  head.write(spec.riffId, 0, 'latin1');
  head.writeUInt32LE((spec.riffSize ?? body.length + 4) >>> 0, 4);
  head.write(spec.waveId, 8, 'latin1');
  const file = Buffer.concat([head, body]);
  return spec.truncateAt === null ? file : file.subarray(0, spec.truncateAt);
}

export const wavFile: fc.Arbitrary<Buffer> = wavHeaderSpec.map(buildWav);

/** A valid 16-bit mono WAV (what a well-behaved client uploads). */
export function validWav(samples: number, sampleRate = 16000): Buffer {
  return buildWav({
    riffId: 'RIFF',
    waveId: 'WAVE',
    riffSize: null,
    fmtSize: 16,
    audioFormat: 1,
    channels: 1,
    sampleRate,
    byteRate: null,
    blockAlign: null,
    bitsPerSample: 16,
    extraChunks: [],
    dataFirst: false,
    dataSize: null,
    payload: new Uint8Array(tonePcm16(samples, sampleRate)),
    truncateAt: null,
  });
}

// ---------------------------------------------------------------- file bodies

/** Magic numbers of formats the service sniffs, followed by noise: reach the decoders, not the first check. */
const sniffedPrefixes = [
  Buffer.from('ID3\x04\x00\x00\x00\x00\x00\x00', 'latin1'),
  Buffer.from([0xff, 0xfb, 0x90, 0x64]),
  Buffer.from([0xff, 0xf3]),
  Buffer.from('OggS', 'latin1'),
  Buffer.from('fLaC', 'latin1'),
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  Buffer.from([0xff, 0xd8, 0xff, 0xe0]),
  Buffer.from('RIFF\x00\x00\x00\x00WEBPVP8 ', 'latin1'),
  Buffer.from('GIF89a', 'latin1'),
];

/** Any file a client might upload: WAV with arbitrary headers, raw PCM, sniffed magic + noise, random bytes, the given valid files. */
export function uploadedFile(validFiles: Buffer[]): fc.Arbitrary<Buffer> {
  return fc.oneof(
    { weight: 4, arbitrary: wavFile },
    { weight: 2, arbitrary: fc.integer({ min: 0, max: 12000 }).map((n) => tonePcm16(n)) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.constantFrom(...sniffedPrefixes), fc.uint8Array({ maxLength: 2048 }))
        .map(([p, r]) => Buffer.concat([p, r])),
    },
    { weight: 2, arbitrary: fc.uint8Array({ maxLength: 4096 }).map((b) => Buffer.from(b)) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(Buffer.alloc(0), Buffer.alloc(1), Buffer.alloc(255, 0x41), Buffer.alloc(256)),
    },
    ...(validFiles.length ? [{ weight: 8, arbitrary: fc.constantFrom(...validFiles) }] : []),
    ...(validFiles.length
      ? [
          {
            weight: 1,
            arbitrary: fc
              .tuple(fc.constantFrom(...validFiles), fc.nat())
              .map(([f, n]) => f.subarray(0, n % Math.max(1, f.length))),
          },
        ]
      : []),
  );
}

// ---------------------------------------------------------------- strings, path segments, queries

/** encodeURIComponent that also takes lone surrogates (sent as U+FFFD, as a UTF-8 client would). */
export function percentEncode(text: string): string {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9\-_.!~*'()]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Text that reaches string handlers: known ids (to get past lookups) weighted with hostile strings. */
export function fuzzString(dictionary: string[], maxLength = 200): fc.Arbitrary<string> {
  return fc.oneof(
    ...(dictionary.length ? [{ weight: 4, arbitrary: fc.constantFrom(...dictionary) }] : []),
    { weight: 3, arbitrary: fc.string({ maxLength: Math.min(maxLength, 60) }) },
    { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: Math.min(maxLength, 40) }) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: Math.min(maxLength, 40) }) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '',
        ' ',
        '\0',
        '..',
        '../../etc/passwd',
        '${jndi:x}',
        '<script>',
        '%s%n',
        '\u202e',
        '\ud800',
        'null',
        'true',
        '-1',
        '1e309',
        '__proto__',
      ),
    },
    {
      weight: 1,
      arbitrary: fc.integer({ min: 1, max: 12_000 }).map((n) => 'ab. '.repeat(Math.ceil(n / 4)).slice(0, n)),
    },
  );
}

/** A path segment exactly as it goes on the wire (already escaped where a real client would escape). */
export function pathSegment(known: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    ...(known.length ? [{ weight: 5, arbitrary: fc.constantFrom(...known).map(percentEncode) }] : []),
    { weight: 2, arbitrary: fc.uuid().map(String) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        '..',
        '.',
        '%2e%2e',
        '..%2f..%2fetc%2fpasswd',
        '..%5c..%5c',
        '%00',
        'a%00b',
        '%zz',
        '%',
        '%ff%fe',
        '%c0%ae%c0%ae',
        '%E2%80%AE',
        '-1',
        '0',
        '1',
        '01',
        '+1',
        '1.0',
        '1e3',
        '9007199254740993',
        '999999999999999',
        'NaN',
        'null',
        'undefined',
        '__proto__',
        'constructor',
        '%20',
        '*',
        'custom-..',
        'custom-x-1',
        'CON',
        '00000000-0000-0000-0000-000000000000',
        '0123456789abcdef0123456789abcdef',
      ),
    },
    { weight: 2, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).map(percentEncode) },
    {
      weight: 1,
      arbitrary: fc
        .string({ unit: 'binary-ascii', minLength: 1, maxLength: 40 })
        .map((s) => s.replace(/[^\x21-\x7e]|[/?#]/g, (c) => percentEncode(c))),
    },
    { weight: 1, arbitrary: fc.integer({ min: 200, max: 20_000 }).map((n) => 'a'.repeat(n)) },
  );
}

export function queryString(knownNames: string[], dictionary: string[]): fc.Arbitrary<string> {
  const name = fc.oneof(
    ...(knownNames.length ? [fc.constantFrom(...knownNames)] : []),
    fc.constantFrom('__proto__', 'a[b]', 'x', ''),
    fc.string({ maxLength: 8 }),
  );
  const value = fc.oneof(
    fuzzString(dictionary, 60).map(percentEncode),
    fc.constantFrom('%', '%zz', '%00', 'a&b', '1', ''),
  );
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant('') },
    {
      weight: 2,
      arbitrary: fc
        .array(fc.tuple(name, value), { minLength: 1, maxLength: 4 })
        .map((pairs) => `?${pairs.map(([k, v]) => `${percentEncode(k)}=${v}`).join('&')}`),
    },
    { weight: 1, arbitrary: fc.constantFrom('?', '?&&', '?=', '?a', '?%', '?a=1&a=2&a=3', `?${'x='.repeat(2000)}`) },
  );
}

// ---------------------------------------------------------------- JSON bodies

export interface JsonSchema {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  nullable?: boolean;
  format?: string;
}

export interface SchemaContext {
  /** `#/components/schemas/<name>` targets. */
  components: Record<string, JsonSchema>;
  /** Known ids and values (avatar ids, models, providers, voices, session ids) used for any string field. */
  dictionary: string[];
  /** Values that get past a field's lookup, by field name (`avatar_id` → the avatar ids, `sdp` → offers). */
  fieldHints: Array<[RegExp, string[] | fc.Arbitrary<string>]>;
}

/** Any JSON value, including ones that stress parsers (deep nesting, prototype keys, huge numbers). */
const hostileJson = fc.oneof(
  { weight: 6, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom<unknown>(
      null,
      [],
      {},
      0,
      -0,
      1e308,
      '',
      true,
      JSON.parse('{"__proto__":{"polluted":1}}'),
      { constructor: { prototype: { polluted: 1 } } },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 1, max: 3000 }).map((depth) => JSON.parse('['.repeat(depth) + ']'.repeat(depth))),
  },
);

/** A value of the wrong kind for a field, or a boundary value of the right kind. */
function mutatedValue(schema: JsonSchema): fc.Arbitrary<unknown> {
  const boundary: unknown[] = [null, '', 0, -1, 1.5, true, [], {}, 'x'.repeat(100_000)];
  if (schema.maxLength !== undefined) boundary.push('y'.repeat(schema.maxLength + 1), 'z'.repeat(schema.maxLength));
  if (schema.minLength !== undefined && schema.minLength > 0) boundary.push('w'.repeat(schema.minLength - 1));
  if (schema.maximum !== undefined) boundary.push(schema.maximum + 1, schema.maximum, schema.maximum + 0.5);
  if (schema.minimum !== undefined) boundary.push(schema.minimum - 1, schema.minimum);
  return fc.oneof(fc.constantFrom(...boundary), hostileJson);
}

function resolve(schema: JsonSchema, ctx: SchemaContext): JsonSchema {
  if (!schema.$ref) return schema;
  const name = schema.$ref.split('/').at(-1)!;
  return ctx.components[name] ?? {};
}

/** Values a field's name or description points at: known ids for id fields, the provider ids a description lists. */
function hintsFor(
  fieldName: string,
  schema: JsonSchema & { description?: string },
  ctx: SchemaContext,
  fits: (s: string) => boolean,
): fc.Arbitrary<string> | null {
  const matching = ctx.fieldHints.filter(([pattern]) => pattern.test(fieldName)).map(([, values]) => values);
  const byDescription = ctx.dictionary.filter((value) => value.length > 2 && schema.description?.includes(value));
  // Not de-duplicated: a value listed twice is drawn twice as often.
  const values = [...matching.filter(Array.isArray).flat(), ...byDescription].filter(fits);
  const generators = matching.filter((m): m is fc.Arbitrary<string> => !Array.isArray(m));
  const all = [...(values.length ? [fc.constantFrom(...values)] : []), ...generators];
  return all.length ? fc.oneof(...all) : null;
}

/**
 * A value shaped by `schema`. Most values are right (known ids where the field name or description
 * points at them, so requests get past validation and lookups into the handlers); one value in 16 is
 * mutated (wrong type, boundary, hostile), and objects now and then lose a required field or gain an
 * unknown one.
 */
export function schemaShaped(input: JsonSchema, ctx: SchemaContext, depth = 0, fieldName = ''): fc.Arbitrary<unknown> {
  const schema = resolve(input, ctx) as JsonSchema & { description?: string };
  const withMutation = (valid: fc.Arbitrary<unknown>) =>
    fc.oneof({ weight: 15, arbitrary: valid }, { weight: 1, arbitrary: mutatedValue(schema) });
  // fc.option's freq: null once in `freq` draws.
  const nullable = (valid: fc.Arbitrary<unknown>) =>
    schema.nullable ? fc.option(valid, { nil: null, freq: 6 }) : valid;
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants) return fc.oneof(...variants.map((v) => schemaShaped(v, ctx, depth + 1, fieldName)));
  if (schema.enum) return withMutation(fc.constantFrom(...schema.enum));
  if (schema.const !== undefined) return withMutation(fc.constant(schema.const));
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'string': {
      if (schema.format === 'binary') return fc.constant('');
      const max = Math.min(schema.maxLength ?? 200, 2000);
      const min = Math.min(schema.minLength ?? 0, max);
      const fits = (s: string) => s.length >= min && s.length <= max;
      const hints = hintsFor(fieldName, schema, ctx, fits);
      const valid = fc.oneof(
        ...(hints ? [{ weight: 6, arbitrary: hints }] : []),
        { weight: 2, arbitrary: fuzzString(ctx.dictionary, max).filter(fits) },
        { weight: 1, arbitrary: fc.string({ minLength: min, maxLength: Math.min(max, 80) }) },
        ...(schema.format === 'uuid' ? [{ weight: 2, arbitrary: fc.uuid().map(String) }] : []),
      );
      return withMutation(nullable(valid));
    }
    case 'integer':
    case 'number': {
      const min = schema.minimum ?? -1e6;
      const max = schema.maximum ?? 1e6;
      const valid =
        type === 'integer'
          ? fc.integer({ min: Math.ceil(min), max: Math.floor(max) })
          : fc.double({ min, max, noNaN: true });
      return withMutation(nullable(valid));
    }
    case 'boolean':
      return withMutation(nullable(fc.boolean()));
    case 'array': {
      if (depth > 4) return fc.constant([]);
      const items = schema.items ? schemaShaped(schema.items, ctx, depth + 1, fieldName) : hostileJson;
      const minLength = schema.minItems ?? 0;
      return withMutation(
        nullable(fc.array(items, { minLength, maxLength: Math.max(minLength, Math.min(schema.maxItems ?? 4, 4)) })),
      );
    }
    case 'object':
    default: {
      if (!schema.properties || depth > 4) return withMutation(hostileJson);
      const required = new Set(schema.required ?? []);
      const fields = Object.entries(schema.properties).map(([name, sub]) =>
        fc.tuple(
          fc.constant(name),
          schemaShaped(sub, ctx, depth + 1, name),
          required.has(name) ? fc.constant(true) : fc.boolean(),
        ),
      );
      const object = fc
        .tuple(
          fc.tuple(...fields),
          required.size ? rarely(fc.constantFrom(...required), 9) : fc.constant(null),
          rarely(fc.tuple(fc.string({ maxLength: 12 }), hostileJson), 9),
        )
        .map(([entries, drop, extra]) => {
          const out: Record<string, unknown> = {};
          for (const [name, value, present] of entries) if (present && name !== drop) out[name] = value;
          if (extra) out[extra[0]] = extra[1];
          return out;
        });
      return withMutation(nullable(object));
    }
  }
}

/** Text a client could send as a JSON body: arbitrary JSON, `fc.anything()` serialised, or malformed text. */
export const arbitraryJsonText: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: hostileJson.map((v) => JSON.stringify(v) ?? 'null') },
  { weight: 2, arbitrary: fc.json({ maxDepth: 3 }) },
  {
    weight: 2,
    arbitrary: fc
      .anything({
        maxDepth: 3,
        withBigInt: false,
        withMap: true,
        withSet: true,
        withDate: true,
        withTypedArray: true,
        withSparseArray: true,
        withNullPrototype: true,
      })
      .map((v) => {
        try {
          return JSON.stringify(v) ?? '';
        } catch {
          return String(v);
        }
      }),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.json(), fc.nat()).map(([text, n]) => text.slice(0, n % Math.max(1, text.length))),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 100 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '{',
      '{"a":',
      '[1,2',
      '{"text":"\\ud800"}',
      '{"a":1,"a":2}',
      '\ufeff{}',
      'nul',
      '{"text":"x"}\n{"text":"y"}',
      '"\\u0000"',
    ),
  },
);

export const jsonContentType = fc.constantFrom(
  'application/json',
  'application/json',
  'application/json',
  'application/json; charset=utf-8',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data',
  'application/json; charset=utf-16le',
  'application/vnd.api+json',
  '',
  'application/json;;;',
);

/** SDP offers: the given real one, and copies with lines dropped, duplicated, cut, reordered or with numbers changed. */
export function sdpOffer(valid: string): fc.Arbitrary<string> {
  const lines = valid.split('\r\n').filter(Boolean);
  const mutate = fc
    .record({
      op: fc.constantFrom('drop', 'duplicate', 'renumber', 'cut', 'swap', 'inject', 'lf-only'),
      index: fc.nat({ max: lines.length - 1 }),
      other: fc.nat({ max: lines.length - 1 }),
      number: fc.oneof(fc.constantFrom(-1, 0, 65536, 4294967296, 1e21), fc.integer()),
      junk: fc.string({ unit: 'binary', maxLength: 80 }),
    })
    .map(({ op, index, other, number, junk }) => {
      const out = [...lines];
      if (op === 'drop') out.splice(index, 1);
      if (op === 'duplicate') out.splice(index, 0, out[index]);
      if (op === 'renumber') out[index] = out[index].replace(/\d+/, String(number));
      if (op === 'cut') out[index] = out[index].slice(0, Math.max(2, out[index].length >> 1));
      if (op === 'swap') [out[index], out[other]] = [out[other], out[index]];
      if (op === 'inject') out.splice(index, 0, junk);
      return out.join(op === 'lf-only' ? '\n' : '\r\n') + '\r\n';
    });
  return fc.oneof({ weight: 1, arbitrary: fc.constant(valid) }, { weight: 4, arbitrary: mutate });
}

// ---------------------------------------------------------------- multipart

export interface MultipartPart {
  name: string | null;
  filename: string | null;
  contentType: string | null;
  body: Buffer;
}

export interface MultipartSpec {
  parts: MultipartPart[];
  /** Boundary used in the body. */
  boundary: string;
  /** What the Content-Type header says: the same boundary, another one, none, or something broken. */
  header: string;
  ending: 'closed' | 'unterminated' | 'truncated' | 'garbage-after';
  truncateAt: number;
  newline: '\r\n' | '\n';
}

export function buildMultipart(spec: MultipartSpec): { contentType: string; body: Buffer } {
  const nl = spec.newline;
  const chunks: Buffer[] = [];
  for (const part of spec.parts) {
    let disposition = 'Content-Disposition: form-data';
    if (part.name !== null) disposition += `; name="${part.name}"`;
    if (part.filename !== null) disposition += `; filename="${part.filename}"`;
    const headers = [disposition, ...(part.contentType !== null ? [`Content-Type: ${part.contentType}`] : [])];
    chunks.push(
      Buffer.from(`--${spec.boundary}${nl}${headers.join(nl)}${nl}${nl}`, 'utf8'),
      part.body,
      Buffer.from(nl),
    );
  }
  if (spec.ending !== 'unterminated') chunks.push(Buffer.from(`--${spec.boundary}--${nl}`));
  if (spec.ending === 'garbage-after')
    chunks.push(Buffer.from(`--${spec.boundary}${nl}Content-Disposition: form-data; name="late"${nl}${nl}x`));
  let body = Buffer.concat(chunks);
  if (spec.ending === 'truncated') body = body.subarray(0, spec.truncateAt % Math.max(1, body.length));
  return { contentType: spec.header, body };
}

export interface MultipartForm {
  /** Text fields with their schema (from the OpenAPI component). */
  fields: Record<string, JsonSchema>;
  /** Binary fields (`format: binary`). */
  files: string[];
  required: string[];
}

/**
 * Multipart bodies for `form`. One in three is well formed with only the file varying (so uploads reach
 * the decoders); the others have schema-shaped text fields, arbitrary files (some valid for that field,
 * from `validFilesFor`), extra/duplicate parts, and one in four has broken framing.
 */
export function multipartBody(
  form: MultipartForm,
  ctx: SchemaContext,
  validFilesFor: (field: string) => Buffer[],
): fc.Arbitrary<MultipartSpec> {
  const fieldValue = (name: string, schema: JsonSchema) =>
    fc.oneof(
      {
        weight: 4,
        arbitrary: schemaShaped(schema, ctx, 0, name).map((v) =>
          typeof v === 'string' ? v : (JSON.stringify(v) ?? ''),
        ),
      },
      { weight: 1, arbitrary: fuzzString(ctx.dictionary) },
    );
  const textPart = (name: string, schema: JsonSchema): fc.Arbitrary<MultipartPart> =>
    fc.record<MultipartPart>({
      name: fc.constant(name),
      filename: fc.constant(null),
      contentType: fc.constant(null),
      body: fieldValue(name, schema).map((s) => Buffer.from(s)),
    });
  const filePart = (name: string): fc.Arbitrary<MultipartPart> =>
    fc.record<MultipartPart>({
      name: fc.constant(name),
      filename: fc.oneof(
        fc.constantFrom('sample.wav', 'a.mp3', 'face.png', 'x', '', '../../etc/passwd', 'C:\\boot.ini', 'é✓.wav'),
        fc.string({ maxLength: 30 }).map((s) => s.replace(/["\r\n]/g, '_')),
      ),
      contentType: fc.constantFrom(
        null,
        'application/octet-stream',
        'audio/wav',
        'audio/mpeg',
        'image/png',
        'image/jpeg',
        'text/plain',
        'x/y',
      ),
      body: uploadedFile(validFilesFor(name)),
    });
  // Left out: a required part once in 8 draws, an optional one every other draw.
  const present = <T>(name: string, arb: fc.Arbitrary<T>) =>
    fc.option(arb, { freq: form.required.includes(name) ? 8 : 2 });
  const known = fc.tuple(
    ...Object.entries(form.fields).map(([name, schema]) => present(name, textPart(name, schema))),
    ...form.files.map((name) => present(name, filePart(name))),
  );
  const extra = fc.oneof(
    { weight: 3, arbitrary: fc.constant<MultipartPart[]>([]) },
    {
      weight: 1,
      arbitrary: fc.array(
        fc.oneof(
          fc.record<MultipartPart>({
            name: fc.option(fc.string({ maxLength: 10 }).map((s) => s.replace(/["\r\n]/g, '_'))),
            filename: fc.constant(null),
            contentType: fc.constant(null),
            body: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)),
          }),
          ...(form.files.length ? [filePart(form.files[0])] : []),
          ...Object.keys(form.fields).map((name) => filePart(name)),
        ),
        { minLength: 1, maxLength: 2 },
      ),
    },
  );
  const boundary = fc.oneof(
    { weight: 4, arbitrary: fc.stringMatching(/^[0-9a-f]{8,40}$/).map((h) => `----fuzz${h}`) },
    { weight: 1, arbitrary: fc.constantFrom('a', '-', 'x'.repeat(70), 'with space') },
  );
  type Framing = { headerKind: string; ending: MultipartSpec['ending']; newline: MultipartSpec['newline'] };
  const framing = fc.oneof(
    { weight: 3, arbitrary: fc.constant<Framing>({ headerKind: 'same', ending: 'closed', newline: '\r\n' }) },
    {
      weight: 1,
      arbitrary: fc.record<Framing>({
        headerKind: fc.constantFrom('same', 'quoted', 'other', 'none', 'empty', 'json'),
        ending: fc.constantFrom('closed', 'unterminated', 'truncated', 'garbage-after'),
        newline: fc.constantFrom('\r\n', '\n'),
      }),
    },
  );
  const anyForm = fc
    .record({ known, extra, boundary, framing, truncateAt: fc.nat(), shuffle: fc.boolean() })
    .map(
      ({
        known: knownParts,
        extra: extraParts,
        boundary: b,
        framing: { headerKind, ending, newline },
        truncateAt,
        shuffle,
      }) => {
        const parts: MultipartPart[] = [...knownParts.filter((p) => p !== null), ...extraParts];
        if (shuffle) parts.reverse();
        const header = {
          same: `multipart/form-data; boundary=${b.includes(' ') ? `"${b}"` : b}`,
          quoted: `multipart/form-data; boundary="${b}"`,
          other: 'multipart/form-data; boundary=not-the-one',
          none: 'multipart/form-data',
          empty: 'multipart/form-data; boundary=',
          json: 'application/json',
        }[headerKind]!;
        return { parts, boundary: b, header, ending, truncateAt, newline } as MultipartSpec;
      },
    );
  // A well-formed form whose only variable is the file: required fields with values that pass their
  // checks, so the upload reaches the decoders and converters (WAV headers, random bytes, sniffed formats).
  const requiredText = Object.entries(form.fields).filter(([name]) => form.required.includes(name));
  const wellFormed = fc
    .record({
      fields: fc.tuple(
        ...requiredText.map(([name, schema]) => {
          const hints = hintsFor(name, schema as JsonSchema & { description?: string }, ctx, (v) => v.length > 0);
          return fc.record<MultipartPart>({
            name: fc.constant(name),
            filename: fc.constant(null),
            contentType: fc.constant(null),
            body: (hints ?? fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 20 })).map((v) =>
              Buffer.from(v),
            ),
          });
        }),
      ),
      files: fc.tuple(...form.files.map((name) => filePart(name))),
      boundary: fc.stringMatching(/^[0-9a-f]{16}$/).map((h) => `----fuzz${h}`),
    })
    .map(
      ({ fields, files, boundary: b }): MultipartSpec => ({
        parts: [...fields, ...files],
        boundary: b,
        header: `multipart/form-data; boundary=${b}`,
        ending: 'closed',
        truncateAt: 0,
        newline: '\r\n',
      }),
    );
  return fc.oneof({ weight: 1, arbitrary: wellFormed }, { weight: 2, arbitrary: anyForm });
}
