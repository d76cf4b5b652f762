import { Type } from '@sinclair/typebox';
import { MAX_OUTPUT_URL_CHARS } from '../streaming/output-url.ts';

export const OutputCreateBody = Type.Object(
  {
    type: Type.Union([Type.Literal('rtmp'), Type.Literal('whip')]),
    url: Type.String({
      minLength: 1,
      maxLength: MAX_OUTPUT_URL_CHARS,
      description: 'rtmp(s)://host/app/key, or the http(s) WHIP endpoint; no user:password@',
    }),
    bearer_token: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 4096,
        description:
          "WHIP only: sent as `Authorization: Bearer` to the WHIP URL's origin only (redirects are not followed; a resource Location on another origin fails the push); never shown or logged",
      }),
    ),
  },
  { additionalProperties: false, examples: [{ type: 'rtmp', url: 'rtmp://127.0.0.1:1935/live/avatar' }] },
);

export const OutputStatusBody = Type.Object(
  {
    output_id: Type.String(),
    type: Type.Union([Type.Literal('rtmp'), Type.Literal('whip')]),
    url: Type.String({ description: 'Scheme, host and first path segment only' }),
    state: Type.Union(
      [
        Type.Literal('connecting'),
        Type.Literal('live'),
        Type.Literal('retrying'),
        Type.Literal('failed'),
        Type.Literal('stopped'),
      ],
      {
        description:
          '`live` once the media server took the stream: RTMP after ffmpeg reports output progress (handshake and publish done), WHIP once connected',
      },
    ),
  },
  { $id: 'OutputStatus', description: 'An RTMP or WHIP output of a session (docs/streaming.md)' },
);

export const OutputListBody = Type.Object({ outputs: Type.Array(Type.Ref('OutputStatus')) });
