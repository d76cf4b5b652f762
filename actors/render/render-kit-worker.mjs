// Registers tsx inside the worker thread so the TypeScript worker loads under tsx, vitest and benches.
import { register } from 'tsx/esm/api';

register();
const worker = await import('./render-kit-worker.ts');

export default worker.default;
