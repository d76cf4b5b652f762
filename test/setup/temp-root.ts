/**
 * Every test file gets a temp root of its own (`TMPDIR`, which `os.tmpdir()` and every child process read), removed
 * after the file's own `afterAll` hooks: the apps, service processes, clips and engines a file starts leave nothing
 * in the machine's temp dir (a full run used to leave ~1.3 GB there, mostly copies of the repository's avatars).
 * `TEST_SHARED_TMPDIR` keeps the machine's temp dir for what is meant to outlive one file (tsx's transpile cache).
 */
import { mkdtempSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll } from 'vitest';

const machineTmp = process.env.TEST_SHARED_TMPDIR ?? os.tmpdir();
process.env.TEST_SHARED_TMPDIR = machineTmp;
const fileTmp = mkdtempSync(path.join(machineTmp, 'vitest-file-'));
process.env.TMPDIR = fileTmp;

// Registered before the file's hooks, so it runs after them (vitest runs after-hooks in reverse order): the file's
// services and engines have been stopped by then. Processes that outlive them (a killed service's engine) lose
// files under a directory nobody reads any more, which is harmless.
afterAll(async () => {
  process.env.TMPDIR = machineTmp;
  await fs.rm(fileTmp, { recursive: true, force: true, maxRetries: 3, retryDelay: 100 });
});
