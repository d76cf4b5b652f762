import net from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';
import type { ServiceConfig } from '../config.ts';

/**
 * The one place that decides whether a request may reach the service at all, judged by where it says it
 * comes from (docs/security.md). Two rules, both cheap and header-only:
 *
 * - **Host** must name this service: the bind address, `localhost`, the loopback literals, the host of
 *   SERVICE_PUBLIC_BASE_URL or of SERVICE_NODE_URL, or an entry of SERVICE_ALLOWED_HOSTS; on a wildcard bind
 *   (0.0.0.0, ::) any IP literal too. A page that rebinds its own DNS name to this machine's address still
 *   sends its own name as Host, so DNS rebinding is refused here. Ports are not compared: a name is what
 *   rebinding needs, and a proxy or a port mapping may change the port.
 * - **Origin**, when present on a state-changing request or a WebSocket upgrade, must be the service's own
 *   origin (the request's Host, or SERVICE_PUBLIC_BASE_URL) or listed in SERVICE_CORS_ORIGINS (`*` = any).
 *   Browsers send a cross-site multipart or form POST and a WebSocket upgrade without a preflight, so CORS
 *   alone does not stop them; this does. Without Origin (curl, server-to-server) the request passes, unless
 *   the browser's `Sec-Fetch-Site: cross-site` says it is a foreign page's after all.
 */

/** Methods that change state: a foreign page must not send them, with or without a preflight. */
const STATE_CHANGING_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** Bind addresses that listen on every interface: any of this machine's addresses (or a mapped one) is legitimate. */
const WILDCARD_BINDS = new Set(['0.0.0.0', '::', '']);
/** Always this machine, whatever the bind: not names an attacker's DNS can answer for. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];

export const HOST_REFUSED_DETAIL =
  'the Host header does not name this service; SERVICE_ALLOWED_HOSTS lists the names it answers to (docs/security.md)';
export const ORIGIN_REFUSED_DETAIL =
  'cross-origin request refused: its Origin is neither this service nor listed in SERVICE_CORS_ORIGINS (docs/security.md)';

/** What the guard reads from the configuration. */
export type RequestOriginConfig = Pick<
  ServiceConfig,
  'host' | 'publicBaseUrl' | 'corsOrigins' | 'allowedHosts' | 'cluster'
>;

interface HostName {
  /** Lower case, without IPv6 brackets or a trailing dot. */
  name: string;
  /** The explicit port, or null when the Host header named none (the scheme's default). */
  port: number | null;
}

export class RequestOriginGuard {
  private readonly anyHost: boolean;
  private readonly hostNames = new Set<string>();
  /** `.example.com` entries of SERVICE_ALLOWED_HOSTS: the domain and every subdomain. */
  private readonly hostSuffixes: string[] = [];
  private readonly ipLiteralHosts: boolean;
  private readonly anyOrigin: boolean;
  private readonly listedOrigins: Set<string>;
  private readonly publicOrigin: string;

  constructor(config: RequestOriginConfig) {
    const bind = bare(config.host);
    this.ipLiteralHosts = WILDCARD_BINDS.has(bind);
    const named = [...LOOPBACK_NAMES, new URL(config.publicBaseUrl).hostname];
    if (!this.ipLiteralHosts) named.push(bind);
    if (config.cluster) named.push(new URL(config.cluster.nodeUrl).hostname);
    this.anyHost = config.allowedHosts.includes('*');
    for (const entry of config.allowedHosts) {
      if (entry.startsWith('.')) this.hostSuffixes.push(bare(entry.slice(1)));
      else if (entry !== '*') named.push(entry);
    }
    for (const name of named) this.hostNames.add(bare(name));
    this.anyOrigin = config.corsOrigins.includes('*');
    // Each entry in its canonical form (however the operator spelled it); entries that are no http(s) origin list nothing.
    this.listedOrigins = new Set(config.corsOrigins.flatMap((origin) => parseOrigin(origin)?.origin ?? []));
    this.publicOrigin = new URL(config.publicBaseUrl).origin;
  }

  /**
   * Why this request is refused (a `{detail}` for 403), or null when it may go on. `fromNode`: a cluster
   * node signed it, so the node the client reached has judged its Origin already (only Host is checked).
   */
  refusal(method: string, headers: IncomingHttpHeaders, fromNode = false): string | null {
    const host = headers.host === undefined ? null : parseHost(headers.host);
    // HTTP/1.1 needs a Host (Node refuses a request without one); an HTTP/1.0 client without it is no browser.
    if (headers.host !== undefined && (host === null || !this.allowsHost(host.name))) return HOST_REFUSED_DETAIL;
    if (fromNode || !this.judgesOrigin(method, headers)) return null;
    const origin = headers.origin;
    if (origin === undefined) {
      return headers['sec-fetch-site'] === 'cross-site' && !this.anyOrigin ? ORIGIN_REFUSED_DETAIL : null;
    }
    return this.allowsOrigin(origin, host) ? null : ORIGIN_REFUSED_DETAIL;
  }

  /**
   * True for an origin SERVICE_CORS_ORIGINS lists, spelled exactly as a browser serialises it (`https://app.example.com`:
   * lower case, no default port, no trailing slash or path). CORS echoes the request's Origin header as
   * Access-Control-Allow-Origin, so only that canonical form is listed: `https://APP.example.com/` or
   * `https://app.example.com:443` come from no browser and are answered as unlisted origins (no CORS headers, 403
   * for a state-changing request or a preflight).
   */
  listsOrigin(origin: string): boolean {
    return this.anyOrigin || this.listedOrigins.has(origin);
  }

  private judgesOrigin(method: string, headers: IncomingHttpHeaders): boolean {
    return STATE_CHANGING_METHODS.has(method.toUpperCase()) || headers.upgrade?.toLowerCase() === 'websocket';
  }

  private allowsHost(name: string): boolean {
    if (this.anyHost || this.hostNames.has(name)) return true;
    if (this.ipLiteralHosts && net.isIP(name) !== 0) return true;
    return this.hostSuffixes.some((suffix) => name === suffix || name.endsWith(`.${suffix}`));
  }

  private allowsOrigin(origin: string, host: HostName | null): boolean {
    if (this.listsOrigin(origin)) return true;
    const parsed = parseOrigin(origin);
    if (parsed === null) return false;
    if (parsed.origin === this.publicOrigin) return true;
    if (host === null || bare(parsed.hostname) !== host.name) return false;
    // Same host and port as the request was sent to. The scheme is not compared: behind a TLS proxy the
    // service itself speaks plain HTTP, yet the page's origin is https.
    if (host.port === null) return parsed.port === '';
    return effectivePort(parsed) === host.port;
  }
}

/** `[::1]` → `::1`, `Example.COM.` → `example.com`: the form host names are compared in. */
function bare(name: string): string {
  return name
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/u, '$1')
    .replace(/\.$/u, '');
}

/** A Host header split into name and port; null when it is not one (garbage is refused, not guessed at). */
function parseHost(value: string): HostName | null {
  const match = /^(\[[0-9a-f:.]+\]|[^:[\]/\s@]+)(?::(\d{1,5}))?$/iu.exec(value.trim());
  if (!match) return null;
  return { name: bare(match[1]), port: match[2] === undefined ? null : Number(match[2]) };
}

function parseOrigin(origin: string): URL | null {
  try {
    const url = new URL(origin);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url : null;
  } catch {
    // `null` (a sandboxed frame, a file:// page) and anything else unparsable is no listed or own origin.
    return null;
  }
}

function effectivePort(url: URL): number {
  if (url.port !== '') return Number(url.port);
  return url.protocol === 'https:' ? 443 : 80;
}
