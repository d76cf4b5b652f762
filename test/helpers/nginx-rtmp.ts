import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './service-process.ts';

/** Debian's nginx (`nginx-light`) and its RTMP module (`libnginx-mod-rtmp`); tools/test-prerequisites.sh installs both. */
export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((file) => spawnSync(file, ['-v']).status === 0);
export const RTMP_MODULE = [
  '/usr/lib/nginx/modules/ngx_rtmp_module.so',
  '/usr/share/nginx/modules/ngx_rtmp_module.so',
].find((file) => spawnSync('test', ['-f', file]).status === 0);

/**
 * A real nginx-rtmp server on a free loopback port, run as the current user with its pid, logs and temp files in
 * a temp dir: one `live` application. `kill` ends it abruptly (a media server gone mid-stream).
 */
export class NginxRtmp {
  private constructor(
    readonly port: number,
    private readonly proc: ChildProcess,
    private readonly dir: string,
  ) {}

  static async start(): Promise<NginxRtmp> {
    if (!NGINX || !RTMP_MODULE)
      throw new Error(
        'nginx or its RTMP module is missing: tools/test-prerequisites.sh installs nginx-light and libnginx-mod-rtmp',
      );
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'nginx-rtmp-'));
    const port = await freePort();
    await fs.writeFile(
      path.join(dir, 'nginx.conf'),
      // One process (no master and worker): a SIGKILL leaves no orphaned worker holding the port.
      `load_module ${RTMP_MODULE};\nmaster_process off;\nworker_processes 1;\ndaemon off;\npid ${path.join(dir, 'nginx.pid')};\n` +
        `error_log ${path.join(dir, 'error.log')} warn;\nevents { worker_connections 64; }\n` +
        `rtmp {\n  server {\n    listen 127.0.0.1:${port};\n    application live {\n      live on;\n      record off;\n    }\n  }\n}\n`,
    );
    const proc = spawn(NGINX, ['-p', dir, '-e', path.join(dir, 'error.log'), '-c', path.join(dir, 'nginx.conf')], {
      stdio: 'ignore',
    });
    const server = new NginxRtmp(port, proc, dir);
    const deadline = performance.now() + 10_000;
    while (!(await accepts(port))) {
      if (performance.now() > deadline || proc.exitCode !== null) {
        await server.kill();
        throw new Error('nginx-rtmp did not start');
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return server;
  }

  url(stream: string): string {
    return `rtmp://127.0.0.1:${this.port}/live/${stream}`;
  }

  /** SIGKILL and cleanup; idempotent. */
  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((resolve) => this.proc.once('exit', resolve));
      this.proc.kill('SIGKILL');
      await exited;
    }
    await fs.rm(this.dir, { recursive: true, force: true });
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
