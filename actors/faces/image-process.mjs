// Entry of a portrait image process: registers tsx so the TypeScript entry loads the same way under npm start,
// vitest and the benchmarks, then serves one upload (see image-process.ts).
import { register } from 'tsx/esm/api';

register();
await import('./image-process.ts');
