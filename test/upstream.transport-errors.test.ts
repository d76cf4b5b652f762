/**
 * One rule hides a server's address in every upstream's transport error (`describeTransportError`,
 * actors/upstream/http.ts): the error text reaches 502 details, `/models` and job errors, so it keeps the error's
 * code and never the host or port undici's cause names. Checked against a real loopback port nothing listens on.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { describeTransportError, fetchUpstream, RequestDeadline } from '../actors/upstream/http.ts';
import { KserveLipsyncClient } from '../actors/lipsync/kserve-client.ts';
import { caught } from './helpers/caught.ts';

/** A loopback address that refuses connections: a port a server just let go. */
async function refusingAddress(): Promise<{ host: string; port: number; url: string }> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return { host: '127.0.0.1', port, url: `http://127.0.0.1:${port}` };
}

function expectNoAddress(text: string, address: { host: string; port: number }): void {
  expect(text).toMatch(/ECONNREFUSED/);
  expect(text).not.toContain(address.host);
  expect(text).not.toContain(String(address.port));
}

describe('upstream transport errors', () => {
  it('keep the code and drop the address, for the TTS, LLM/ASR and KServe clients alike', async () => {
    const address = await refusingAddress();
    const never = new AbortController().signal;

    const raw = await caught(fetch(`${address.url}/v1/audio`));
    expect(String((raw as Error & { cause: Error }).cause.message)).toContain(String(address.port));
    expectNoAddress(describeTransportError(raw), address);

    const tts = (await caught(
      fetchUpstream(fetch, `${address.url}/v1/audio`, { signal: never, provider: 'cloud_a' }),
    )) as Error;
    expect(tts.name).toBe('UpstreamError');
    expectNoAddress(tts.message, address);

    const deadline = new RequestDeadline(never);
    const llm = deadline.translate(
      await caught(fetch(`${address.url}/v1/chat/completions`, { signal: deadline.signal })),
      'LLM',
    );
    deadline.dispose();
    expect(llm.name).toBe('UpstreamError');
    expectNoAddress(llm.message, address);

    const kserve = (await caught(
      new KserveLipsyncClient({ baseUrl: address.url, model: 'wav2lip' }).ready(never),
    )) as Error;
    expect(kserve.name).toBe('KserveError');
    expectNoAddress(kserve.message, address);
  });

  it('say what failed without a cause code', () => {
    expect(describeTransportError(new Error('fetch failed'))).toBe('fetch failed');
    expect(describeTransportError('not an error')).toBe('transport error');
  });
});
