import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';

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

/**
 * The browser's face canvas runs the server's renderers (`client/render-kit.ts`), whose modules also hold their
 * Node-only preparation (sharp, node:fs, node:path). The browser only renders, so those imports become stubs that
 * do nothing and give nothing back (a module's top level may call one, `join` for a constant path; preparation
 * calling one fails at its first use of the result). Which names each exports is read from the real module, so a
 * new import still bundles.
 */
export const nodeOnlyStubs: Plugin = {
  name: 'node-only-stubs',
  setup(builder) {
    builder.onResolve({ filter: /^(sharp|node:.+)$/ }, (args) => ({ path: args.path, namespace: 'node-only' }));
    builder.onLoad({ filter: /.*/, namespace: 'node-only' }, async (args) => {
      const names = Object.keys((await import(args.path)) as object).filter(
        (name) => name !== 'default' && /^[A-Za-z_$][\w$]*$/u.test(name),
      );
      return {
        contents: ['const unavailable = () => undefined;', 'export default unavailable;']
          .concat(names.map((name) => `export const ${name} = unavailable;`))
          .join('\n'),
        loader: 'js',
      };
    });
  },
};

/** A browser bundle of a `client/` entry (`entry` relative to `client/`), as every bundle here is built. */
export async function buildClientBundle(entry: string, format: 'esm' | 'iife'): Promise<string> {
  const result = await build({
    entryPoints: [path.join(CLIENT_DIR, entry)],
    bundle: true,
    minify: true,
    format,
    target: ['es2022'],
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
    plugins: [nodeOnlyStubs],
  });
  return result.outputFiles[0]!.text;
}

/** The bundle's JavaScript; concurrent first requests share one build, a failed build is tried again next time. */
export function clientBundle(name: ClientBundleName): Promise<string> {
  let bundle = built.get(name);
  if (!bundle) {
    const { entry, format } = CLIENT_BUNDLES[name];
    bundle = buildClientBundle(entry, format);
    built.set(name, bundle);
    bundle.catch(() => built.delete(name));
  }
  return bundle;
}
