import { once } from 'node:events';
import type http from 'node:http';

/**
 * Waits until a response that refused a write drains, or closes (the client went away). The losing wait is
 * cancelled, so a fake that writes a large body piece by piece leaves no listener behind per piece.
 */
export async function drainOrClose(res: http.ServerResponse): Promise<'drain' | 'close'> {
  const settled = new AbortController();
  const { signal } = settled;
  try {
    return await Promise.race([
      once(res, 'drain', { signal }).then(() => 'drain' as const),
      once(res, 'close', { signal }).then(() => 'close' as const),
    ]);
  } finally {
    settled.abort();
  }
}
