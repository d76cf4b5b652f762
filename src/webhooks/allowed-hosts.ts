/**
 * SERVICE_WEBHOOK_ALLOWED_HOSTS: the hosts a per-session callback URL (and a webhook tool) may name. The service
 * has no auth, so a callback URL anyone can set would let anyone make it call anywhere (an internal admin page, a
 * cloud metadata address); only the hosts the operator listed are called. Entries are lower case host names or IP
 * addresses; `.example.com` is the domain and its subdomains (validated in `src/config.ts`).
 */
export function callbackUrlAllowed(url: string, allowedHosts: readonly string[]): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return false;
  // Credentials in a callback URL would end up in our requests and logs; nobody needs them for a signed callback.
  if (parsed.username !== '' || parsed.password !== '') return false;
  const host = parsed.hostname.toLowerCase().replace(/^\[(.*)\]$/u, '$1').replace(/\.$/u, '');
  return allowedHosts.some((entry) => {
    if (!entry.startsWith('.')) return host === entry.replace(/^\[(.*)\]$/u, '$1').replace(/\.$/u, '');
    const domain = entry.slice(1).replace(/\.$/u, '');
    return host === domain || host.endsWith(`.${domain}`);
  });
}
