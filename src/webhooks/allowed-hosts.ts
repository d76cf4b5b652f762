/**
 * SERVICE_WEBHOOK_ALLOWED_HOSTS: the hosts a per-session callback URL (and a webhook tool) may name. The service
 * has no auth, so a callback URL anyone can set would let anyone make it call anywhere (an internal admin page, a
 * cloud metadata address); only the hosts the operator listed are called. Entries are lower case host names or IP
 * addresses; `.example.com` is the domain and its subdomains (validated in `src/config.ts`). The one rule for both
 * callers: the session's `webhook_url` (`events.ts`) and a tool's `webhook` (`src/sessions/tools.ts`).
 */
import { quoteClientValue } from '../errors.ts';

/** Why `url` may not be called back (a client-safe sentence about "the URL"), or null when it may. */
export function callbackUrlRefusal(url: string, allowedHosts: readonly string[]): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'is not a URL';
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return 'must be an http or https URL';
  // Credentials in a callback URL would end up in our requests and logs; nobody needs them for a signed callback.
  if (parsed.username !== '' || parsed.password !== '') return 'must not carry credentials';
  if (allowedHosts.length === 0)
    return 'is refused: no callback hosts are allowed (SERVICE_WEBHOOK_ALLOWED_HOSTS is empty)';
  const host = parsed.hostname
    .toLowerCase()
    .replace(/^\[(.*)\]$/u, '$1')
    .replace(/\.$/u, '');
  const allowed = allowedHosts.some((entry) => {
    if (!entry.startsWith('.')) return host === entry.replace(/^\[(.*)\]$/u, '$1').replace(/\.$/u, '');
    const domain = entry.slice(1).replace(/\.$/u, '');
    return host === domain || host.endsWith(`.${domain}`);
  });
  return allowed ? null : `host ${quoteClientValue(host)} is not in SERVICE_WEBHOOK_ALLOWED_HOSTS`;
}

export function callbackUrlAllowed(url: string, allowedHosts: readonly string[]): boolean {
  return callbackUrlRefusal(url, allowedHosts) === null;
}
