import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..');

function trackedFiles(): string[] {
  return execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter(Boolean);
}

describe('a clean clone installs and runs anywhere', () => {
  it('the lockfile carries every optional platform package its dependencies declare (npm ci refuses a lockfile without them)', () => {
    const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { optionalDependencies?: Record<string, string> }>;
    };
    const missing: string[] = [];
    for (const [location, entry] of Object.entries(lock.packages)) {
      for (const name of Object.keys(entry.optionalDependencies ?? {})) {
        // npm resolves a dependency next to its dependant first, then in each enclosing node_modules up to the root.
        const levels = location.split('/node_modules/');
        const candidates = levels.map((_, depth) => {
          const base = levels.slice(0, levels.length - depth).join('/node_modules/');
          return `${base}/node_modules/${name}`;
        });
        candidates.push(`node_modules/${name}`);
        if (!candidates.some((candidate) => candidate in lock.packages)) missing.push(`${location} → ${name}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('no tracked file names an absolute path of the machine it was written on', () => {
    const offenders: string[] = [];
    for (const file of trackedFiles()) {
      if (file === 'package-lock.json' || /\.(png|jpe?g|webp|wav|mp3|mp4|onnx|bin)$/u.test(file)) continue;
      const full = path.join(ROOT, file);
      if (!fs.existsSync(full)) continue;
      const lines = fs.readFileSync(full, 'utf8').split('\n');
      // Tests of the path scrubber feed it absolute paths on purpose.
      const suspicious = lines.filter((line) => !/pathFreeMessage\(|scrubPaths\(/u.test(line));
      if (suspicious.some((line) => /\/work\/(?:shared|main)\b|\/home\/[a-z]|\/root\/|['"`]\/tmp\//u.test(line)))
        offenders.push(file);
    }
    expect(offenders).toEqual([]);
  });

  it('every install script of a dependency is decided in allowScripts (none skipped silently)', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      allowScripts?: Record<string, boolean>;
    };
    const decided = new Set(Object.keys(pkg.allowScripts ?? {}));
    const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { hasInstallScript?: boolean }>;
    };
    const undecided = Object.entries(lock.packages)
      .filter(([location, entry]) => location && entry.hasInstallScript)
      .map(([location]) => location.slice(location.lastIndexOf('node_modules/') + 'node_modules/'.length))
      .filter((name) => !decided.has(name));
    expect(undecided).toEqual([]);
  });
});
