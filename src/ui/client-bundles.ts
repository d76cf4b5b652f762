import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/**
 * The browser bundles of the client library (`client/`), built with esbuild on first request and kept for the
 * process's life: `/widget.js` (the `<avatar-chat>` element, a classic script any page can load) and `/client.js`
 * (the `AvatarClient` ES module the page at `/` imports). No build step, no file on disk, no CDN.
 */
const CLIENT_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'client');

/** Each bundle: its entry point and output format. */
export const CLIENT_BUNDLES = {
  widget: { entry: 'avatar-chat.ts', format: 'iife' },
  client: { entry: 'avatar-client.ts', format: 'esm' },
} as const;
export type ClientBundleName = keyof typeof CLIENT_BUNDLES;

/** The size budget of `/widget.js`, gzipped (docs/embedding.md): what a host page pays to embed the avatar. */
export const WIDGET_GZIP_BUDGET_BYTES = 60 * 1024;

const built = new Map<ClientBundleName, Promise<string>>();

/** The bundle's JavaScript; concurrent first requests share one build, a failed build is tried again next time. */
export function clientBundle(name: ClientBundleName): Promise<string> {
  let bundle = built.get(name);
  if (!bundle) {
    const { entry, format } = CLIENT_BUNDLES[name];
    bundle = build({
      entryPoints: [path.join(CLIENT_DIR, entry)],
      bundle: true,
      minify: true,
      format,
      target: ['es2022'],
      write: false,
      legalComments: 'none',
      logLevel: 'silent',
    }).then((result) => result.outputFiles[0]!.text);
    built.set(name, bundle);
    bundle.catch(() => built.delete(name));
  }
  return bundle;
}
