// Entry of a built-in engine process: registers tsx so the TypeScript entry loads the same way under npm start,
// vitest and the benchmarks, then starts the engine (see engine-process.ts).
import { register } from 'tsx/esm/api';

register();
await import('./engine-process.ts');
