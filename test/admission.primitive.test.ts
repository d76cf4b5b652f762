/**
 * The one admission primitive (`actors/admission.ts`) every bounded queue uses: slots, a bounded waiting line in
 * arrival order, a waiter's AbortSignal, the typed overload refusal, and what the error plugin makes of it.
 */
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { Admission, Overloaded } from '../actors/admission.ts';
import { ImageJobsBusyError, IMAGE_JOBS_RETRY_AFTER_S } from '../actors/faces/image-jobs.ts';
import { AudioDecoderBusyError, AUDIO_DECODER_BUSY_RETRY_AFTER_S } from '../actors/audio/decode-pool.ts';
import { ViewersFullError, WHEP_FULL_RETRY_AFTER_S } from '../actors/media/whep.ts';
import { BUNDLE_QUEUE_RETRY_AFTER_S, QueueFullError } from '../src/recording/offline-jobs.ts';
import { previewAdmission, PREVIEW_RETRY_AFTER_S } from '../src/tts/preview-queue.ts';
import errorPlugin from '../src/plugins/app/errors.ts';
import { caught } from './helpers/caught.ts';

const full = () => new Overloaded('line is full', 3);

describe('admission primitive', () => {
  it('runs maxRunning at once, lines up maxWaiting behind them and refuses the next at once', async () => {
    const admission = new Admission({ maxRunning: 2, maxWaiting: 1, refusal: full });
    const first = await admission.acquire();
    const second = await admission.acquire();
    const waiting = admission.acquire();
    expect(admission.load).toEqual({ running: 2, waiting: 1 });
    expect(() => admission.acquire()).toThrow(Overloaded);
    first();
    const third = await waiting;
    expect(admission.load).toEqual({ running: 2, waiting: 0 });
    second();
    third();
    third();
    expect(admission.load).toEqual({ running: 0, waiting: 0 });
  });

  it('hands a released slot to the first in line, so a newcomer cannot overtake it', async () => {
    const admission = new Admission({ maxRunning: 1, maxWaiting: 2, refusal: full });
    const release = await admission.acquire();
    const order: string[] = [];
    const a = admission.acquire().then((r) => (order.push('a'), r));
    const b = admission.acquire().then((r) => (order.push('b'), r));
    release();
    expect(() => admission.take()).toThrow(Overloaded);
    (await a)();
    (await b)();
    expect(order).toEqual(['a', 'b']);
    expect(admission.load).toEqual({ running: 0, waiting: 0 });
  });

  it('lets a waiter that gives up leave the line with its own reason, and refuses an already aborted caller', async () => {
    const admission = new Admission({ maxRunning: 1, maxWaiting: 1, refusal: full });
    const release = await admission.acquire();
    const controller = new AbortController();
    const waiting = admission.acquire(controller.signal);
    controller.abort(new Error('client left'));
    expect(((await caught(waiting)) as Error).message).toBe('client left');
    expect(admission.load).toEqual({ running: 1, waiting: 0 });
    expect(() => admission.acquire(controller.signal)).toThrow('client left');
    release();
    expect(admission.load).toEqual({ running: 0, waiting: 0 });
  });

  it('refuses everyone waiting when closed, leaving the running their slots', async () => {
    const admission = new Admission({ maxRunning: 1, maxWaiting: 2, refusal: full });
    const release = await admission.acquire();
    const waiters = [admission.acquire(), admission.acquire()];
    admission.refuseWaiting(new Overloaded('closing', 9));
    for (const waiter of waiters) expect(((await caught(waiter)) as Overloaded).retryAfterS).toBe(9);
    expect(admission.load).toEqual({ running: 1, waiting: 0 });
    release();
  });

  it('is what the TTS previews wait in, refusing with their Retry-After', async () => {
    const previews = previewAdmission(1, 0);
    const release = await previews.acquire();
    const refusal = (() => {
      try {
        previews.acquire();
      } catch (error) {
        return error;
      }
    })();
    expect(refusal).toBeInstanceOf(Overloaded);
    expect((refusal as Overloaded).retryAfterS).toBe(PREVIEW_RETRY_AFTER_S);
    release();
  });

  it('makes every busy or full refusal an Overloaded carrying its own Retry-After', () => {
    const refusals: Array<[Overloaded, number]> = [
      [new ImageJobsBusyError('busy'), IMAGE_JOBS_RETRY_AFTER_S],
      [new AudioDecoderBusyError('busy'), AUDIO_DECODER_BUSY_RETRY_AFTER_S],
      [new ViewersFullError(), WHEP_FULL_RETRY_AFTER_S],
      [new QueueFullError(16), BUNDLE_QUEUE_RETRY_AFTER_S],
    ];
    for (const [error, retryAfterS] of refusals) {
      expect(error, error.name).toBeInstanceOf(Overloaded);
      expect(error.retryAfterS, error.name).toBe(retryAfterS);
      expect(error.detail, error.name).toBe(error.message);
    }
  });

  it('is answered by the error plugin as 503 with its Retry-After, whichever queue refused', async () => {
    const app = Fastify();
    await app.register(errorPlugin);
    app.get('/bundle', async () => {
      throw new QueueFullError(16);
    });
    app.get('/decoder', async () => {
      throw new AudioDecoderBusyError('the audio decoder is busy');
    });
    await app.ready();
    try {
      const bundle = await app.inject({ method: 'GET', url: '/bundle' });
      expect({ status: bundle.statusCode, retryAfter: bundle.headers['retry-after'], body: bundle.json() }).toEqual({
        status: 503,
        retryAfter: String(BUNDLE_QUEUE_RETRY_AFTER_S),
        body: { detail: 'offline bundle queue is full (16 waiting); retry later' },
      });
      const decoder = await app.inject({ method: 'GET', url: '/decoder' });
      expect({ status: decoder.statusCode, retryAfter: decoder.headers['retry-after'] }).toEqual({
        status: 503,
        retryAfter: String(AUDIO_DECODER_BUSY_RETRY_AFTER_S),
      });
    } finally {
      await app.close();
    }
  });
});
