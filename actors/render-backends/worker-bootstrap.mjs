// Piscina entry: registers tsx so the TypeScript worker loads the same way under tsx, vitest and benches.
import { register } from 'tsx/esm/api';

register();
const worker = await import('./worker.ts');
export default worker.default;
