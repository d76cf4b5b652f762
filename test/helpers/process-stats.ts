import fs from 'node:fs/promises';
import path from 'node:path';

/** What a process holds, read from Linux `/proc/<pid>`: the figures a leak test compares. */
export interface ProcessStats {
  /** Entries of `/proc/<pid>/fd`: files, sockets, pipes, eventfds. */
  openFds: number;
  /** VmRSS of `/proc/<pid>/status`, in KiB. */
  rssKiB: number;
  /** Threads of `/proc/<pid>/status` (render workers, libuv pool, wrtc). */
  threads: number;
}

export async function processStats(pid: number): Promise<ProcessStats> {
  const [fds, status] = await Promise.all([fs.readdir(`/proc/${pid}/fd`), fs.readFile(`/proc/${pid}/status`, 'utf8')]);
  const field = (name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status);
    if (!match) throw new Error(`/proc/${pid}/status has no ${name}`);
    return Number(match[1]);
  };
  return { openFds: fds.length, rssKiB: field('VmRSS'), threads: field('Threads') };
}

/** Every descendant of `pid` (children, grandchildren…), from the parent ids in `/proc/<n>/stat`. */
export async function descendants(pid: number): Promise<number[]> {
  const parentOf = new Map<number, number>();
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await fs.readFile(`/proc/${entry}/stat`, 'utf8');
      // Field 4 (ppid) follows the parenthesised command name, which may itself hold spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parentOf.set(Number(entry), ppid);
    } catch {
      // exited meanwhile
    }
  }
  const found: number[] = [];
  let frontier = [pid];
  while (frontier.length) {
    const next = [...parentOf.entries()].filter(([, ppid]) => frontier.includes(ppid)).map(([child]) => child);
    found.push(...next);
    frontier = next;
  }
  return found;
}

/** The summed stats of the descendants of `pid` (e.g. the built-in TTS engine processes), and how many there are. */
export async function descendantStats(pid: number): Promise<ProcessStats & { processes: number }> {
  const total = { openFds: 0, rssKiB: 0, threads: 0, processes: 0 };
  for (const child of await descendants(pid)) {
    try {
      const stats = await processStats(child);
      total.openFds += stats.openFds;
      total.rssKiB += stats.rssKiB;
      total.threads += stats.threads;
      total.processes++;
    } catch {
      // exited meanwhile
    }
  }
  return total;
}

/** The fd targets of a process grouped by kind (`socket`, `pipe`, `anon_inode:[eventfd]`, or the file's directory), for a leak's diagnosis. */
export async function fdKinds(pid: number): Promise<Record<string, number>> {
  const kinds: Record<string, number> = {};
  for (const fd of await fs.readdir(`/proc/${pid}/fd`)) {
    let target: string;
    try {
      target = await fs.readlink(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue; // closed between readdir and readlink
    }
    const kind =
      /^(socket|pipe):/.exec(target)?.[1] ??
      (target.startsWith('/') ? `file ${path.basename(path.dirname(target))}/` : target);
    kinds[kind] = (kinds[kind] ?? 0) + 1;
  }
  return kinds;
}

/**
 * Every file and directory under `dir` (relative paths), e.g. a child's private TMPDIR. A symbolic link is one
 * entry and is not followed: the child's link to the shared tsx transpile cache (service-process.ts) must not count
 * what other processes of the suite write into that cache meanwhile.
 */
export async function entriesUnder(dir: string, prefix = ''): Promise<string[]> {
  const entries: string[] = [];
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const relative = prefix ? `${prefix}/${entry.name}` : entry.name;
    entries.push(relative);
    // A directory removed between the listing and this read is simply gone: the snapshot counts what is there.
    if (entry.isDirectory())
      entries.push(...(await entriesUnder(path.join(dir, entry.name), relative).catch(() => [])));
  }
  return entries.sort();
}
