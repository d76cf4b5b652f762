import net from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';

/**
 * True when the request comes from this machine itself and not through a proxy: the socket's peer is a
 * loopback address (IPv4-mapped forms included) and no `Forwarded` / `X-Forwarded-For` header says the
 * peer only relays someone else's request (a proxy on the same host is a loopback peer too).
 */
export function isLoopbackPeer(remoteAddress: string | undefined, headers: IncomingHttpHeaders): boolean {
  if (remoteAddress === undefined || headers.forwarded !== undefined || headers['x-forwarded-for'] !== undefined)
    return false;
  const address = remoteAddress.toLowerCase().replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/u, '');
  if (net.isIPv4(address)) return address.startsWith('127.');
  return net.isIPv6(address) && address === '::1';
}
