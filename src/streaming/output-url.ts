import { InvalidInput } from '../domain-errors.ts';

export type OutputType = 'rtmp' | 'whip';

/** Schemes each output type pushes to. */
const SCHEMES: Record<OutputType, readonly string[]> = { rtmp: ['rtmp:', 'rtmps:'], whip: ['http:', 'https:'] };
/** Bound on an output URL: a stream key or WHIP path is tens of characters; far longer is no URL anyone configured. */
export const MAX_OUTPUT_URL_CHARS = 2048;

/**
 * Checks an output's URL: the scheme its type speaks, a host, no userinfo (credentials go in `bearer_token` for WHIP or
 * in the stream key, never in the authority, where logs and proxies show them). The detail never quotes the URL.
 */
export function validateOutputUrl(type: OutputType, text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new InvalidInput('url is not an absolute URL');
  }
  if (!SCHEMES[type].includes(url.protocol))
    throw new InvalidInput(`a ${type} output needs a ${SCHEMES[type].map((s) => s.slice(0, -1)).join(' or ')} URL`);
  if (!url.hostname) throw new InvalidInput('url has no host');
  if (url.username || url.password)
    throw new InvalidInput('url must not carry credentials (user:password@); use bearer_token or the stream key');
  if (type === 'rtmp' && url.pathname.split('/').filter(Boolean).length < 2)
    throw new InvalidInput('an rtmp url names an application and a stream key: rtmp://host/app/key');
  return url;
}

/**
 * What GET shows of an output's URL: scheme, host, port and the first path segment (an RTMP application, a WHIP
 * endpoint's first segment); the rest (the stream key, a token in the path) and the query are cut.
 */
export function redactOutputUrl(url: URL): string {
  const first = url.pathname.split('/').filter(Boolean)[0];
  return `${url.protocol}//${url.host}${first ? `/${first}` : ''}`;
}
