import net from 'node:net';

/**
 * A counting TCP proxy in front of redis-server, for the cluster figures (bench/cluster.ts): each node
 * connects through its own proxy, which parses the RESP traffic of every connection and records every
 * command it sends (name, script SHA, request bytes, reply bytes, when). Unlike `INFO commandstats`, this
 * attributes each command to a node and a connection, so the service's own traffic is counted exactly,
 * apart from BullMQ's background polling on other connections.
 */

export interface ProxiedCommand {
  /** Lower-case command name (`get`, `evalsha`, `multi`, …). */
  name: string;
  /** The SHA1 of EVALSHA (or of the script text of EVAL), to name the script. */
  sha: string | null;
  /** The first argument of a plain command (its key, for most), null for scripts and for none. */
  key: string | null;
  /** Size of the request frame on the wire. */
  bytesIn: number;
  /** Size of its reply on the wire (0 until it arrived; replies are paired in order). */
  bytesOut: number;
  /** performance.now() when the request frame was complete. */
  at: number;
  /** Commands a script ran inside Redis (filled in from MONITOR by the caller; 0 for a plain command). */
  inner: number;
}

export interface ProxiedConnection {
  commands: ProxiedCommand[];
  /** Reply bytes that were not paired with a command (pub/sub pushes). */
  unpairedBytesOut: number;
  /** Whether this connection ever sent SUBSCRIBE (the loss announcements' subscriber). */
  subscriber: boolean;
  /** The proxy's own local port towards Redis: this connection's address in MONITOR and CLIENT LIST. */
  upstreamPort: number;
}

export interface CountingProxy {
  port: number;
  connections: ProxiedConnection[];
  close(): Promise<void>;
}

/** Length of one complete RESP value at `offset`, or -1 when the buffer does not hold all of it yet. */
function respLength(buffer: Buffer, offset: number): number {
  const lineEnd = buffer.indexOf('\r\n', offset);
  if (lineEnd < 0) return -1;
  const type = String.fromCharCode(buffer[offset]);
  const header = lineEnd + 2 - offset;
  if (type === '+' || type === '-' || type === ':') return header;
  const count = Number(buffer.toString('latin1', offset + 1, lineEnd));
  if (type === '$') {
    if (count < 0) return header;
    return buffer.length >= offset + header + count + 2 ? header + count + 2 : -1;
  }
  if (type === '*') {
    let length = header;
    for (let i = 0; i < Math.max(0, count); i++) {
      const item = respLength(buffer, offset + length);
      if (item < 0) return -1;
      length += item;
    }
    return length;
  }
  throw new Error(`unexpected RESP type ${JSON.stringify(type)}`);
}

/** The bulk strings of a request frame (an array of bulk strings, as ioredis sends every command). */
function requestArgs(frame: Buffer): string[] {
  const args: string[] = [];
  let offset = frame.indexOf('\r\n') + 2;
  while (offset < frame.length) {
    const lineEnd = frame.indexOf('\r\n', offset);
    const length = Number(frame.toString('latin1', offset + 1, lineEnd));
    args.push(frame.toString('utf8', lineEnd + 2, lineEnd + 2 + length));
    offset = lineEnd + 2 + length + 2;
  }
  return args;
}

/** Splits a byte stream into complete RESP values, keeping the incomplete tail for the next chunk. */
function framer(onFrame: (frame: Buffer) => void): (chunk: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0);
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let offset = 0;
    for (;;) {
      if (offset >= pending.length) break;
      const length = respLength(pending, offset);
      if (length < 0) break;
      onFrame(pending.subarray(offset, offset + length));
      offset += length;
    }
    pending = pending.subarray(offset);
  };
}

export async function startCountingProxy(
  redisPort: number,
  scriptSha: (script: string) => string,
): Promise<CountingProxy> {
  const connections: ProxiedConnection[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: '127.0.0.1', port: redisPort });
    sockets.add(client);
    sockets.add(upstream);
    const connection: ProxiedConnection = { commands: [], unpairedBytesOut: 0, subscriber: false, upstreamPort: 0 };
    upstream.on('connect', () => (connection.upstreamPort = upstream.localPort ?? 0));
    connections.push(connection);
    let replied = 0;
    const fromClient = framer((frame) => {
      const args = requestArgs(frame);
      const name = (args[0] ?? '').toLowerCase();
      if (name === 'subscribe' || name === 'psubscribe') connection.subscriber = true;
      const sha = name === 'evalsha' ? args[1] : name === 'eval' ? scriptSha(args[1]) : null;
      const key = sha === null && args.length > 1 ? args[1] : null;
      connection.commands.push({ name, sha, key, bytesIn: frame.length, bytesOut: 0, at: performance.now(), inner: 0 });
    });
    const fromRedis = framer((frame) => {
      // A subscriber's pushes answer no command; everything else is answered in order.
      if (connection.subscriber || replied >= connection.commands.length) connection.unpairedBytesOut += frame.length;
      else connection.commands[replied++].bytesOut = frame.length;
    });
    client.on('data', (chunk: Buffer) => {
      fromClient(chunk);
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      fromRedis(chunk);
      client.write(chunk);
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', close);
    upstream.on('close', close);
    client.on('error', close);
    upstream.on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    connections,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
