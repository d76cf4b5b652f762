import { readFileSync } from 'node:fs';

/** The service's version, from package.json: one source for OpenAPI `info.version` and `avatar_build_info`. */
export const SERVICE_VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
